"""sim's configuration for PyTorch's device-generic OpInfo tests: what runs, and sim's honest gap, as data.

The device-generic test module (examples/device_generic/test_sim_opinfo.py, which a vendor copies and
points at its own configuration module) runs every OpInfo on sim against the CPU, bit for bit: forward
in seven dtypes, backward in float64, and every bad-input case. Nothing else in it skips, expects
failures or loosens a comparison: each entry below was observed, and its reason says why. The data has
the shape of the knobs torch's DeviceTypeTestBase gives vendors: `op_allowlist` (which OpInfos run) and
per-OpInfo decorations (`op_overrides`), built from the reasons here by the test module.

A reason that starts with "skip:" makes the test skip (the op cannot run at all, crashes, hangs, or there
is nothing to compare with); one that starts with "tolerance:" compares at test_ops.py's test_compare_cpu
tolerance (`TOLERANCE`) instead of bit for bit, for results the CPU itself does not reproduce bit for bit;
any other reason makes the test an expected failure, so the day the backend fixes it the test reports an
unexpected success and the entry must go.

`GAPS` maps an OpInfo's full name (name plus variant, e.g. "div.floor_rounding") to a reason that holds
for all three tests. `EXCEPTIONS` maps (full name, test, dtype) to a reason for one test ("forward",
"backward" or "error_inputs"), in one dtype (e.g. "bfloat16") or in all (None).

`SHAPES_ONLY` maps the OpInfos whose output values are not defined to the reason; for those the test
compares only the structure, shapes, dtypes and devices of the outputs. They count as passing and are
listed here so that the weaker check is in the same file. (Random ops are not here: sim's device
generator draws the same stream as the CPU generator from the same seed, so they are compared by value.)

`python -m torch_sim.device_generic_report` runs the full sweep and writes its table.
"""
from __future__ import annotations

TEST_CLASS = "TestSimOpInfo"
TESTS: tuple[str, ...] = ("forward", "backward", "error_inputs")
# The dtypes of the forward test, and the one of the backward test.
FORWARD_DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16", "int64", "bool", "complex64")
BACKWARD_DTYPE = "float64"
# For the few comparisons EXCEPTIONS allows a tolerance: test_ops.py test_compare_cpu's.
TOLERANCE = 1e-3

# The default run's op_allowlist: OpInfo full names, grouped by kind (the full sweep runs every OpInfo).
DEFAULT_SUBSET: tuple[str, ...] = (
    # element-wise, unary
    "abs", "neg", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
    "floor", "round", "sign", "reciprocal", "nan_to_num", "clamp", "special.erfcx",
    # element-wise, binary and ternary
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "pow", "maximum", "minimum",
    "fmod", "remainder", "atan2", "eq", "lt", "ge", "where", "lerp", "addcmul", "addcdiv", "logaddexp",
    "isclose",
    # reductions and scans
    "sum", "mean", "prod", "amax", "amin", "max.reduction_with_dim", "argmax", "std", "var", "norm",
    "logsumexp", "cumsum", "sort", "topk", "median", "all", "any", "count_nonzero",
    # linear algebra
    "mm", "bmm", "matmul", "addmm", "addmv", "baddbmm", "einsum", "linalg.vector_norm", "linalg.inv",
    "linalg.solve", "linalg.qr", "linalg.cholesky", "linalg.lstsq", "tensordot", "outer", "addr",
    # nn.functional
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "nn.functional.embedding", "nn.functional.dropout", "nn.functional.cross_entropy",
    "nn.functional.linear_cross_entropy.chunked",
    "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "nn.functional.interpolate.bilinear",
    "nn.functional.pad.constant", "nn.functional.scaled_dot_product_attention",
    # indexing, scatter/gather, masking
    "index_select", "gather", "scatter", "scatter_add", "index_add", "index_put", "masked_fill",
    "masked_select", "take_along_dim", "__getitem__", "nonzero", "tril",
    # views, shapes and creation
    "view", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "flatten", "narrow",
    "cat", "stack", "split", "chunk", "flip", "roll", "repeat", "contiguous", "as_strided", "unfold",
    "zeros_like", "full_like", "arange", "linspace", "clone",
    # random
    "bernoulli", "normal", "randn_like",
)

_NO_SPARSE = ("sim has strided tensors only: the host fallback refuses to bring a {layout} result back "
              "to the device ('sim supports strided tensors only, got layout {layout}', to_device in "
              "backend/csrc/operators.cpp), {where}")
_JITERATOR = ("skip: CUDA-only OpInfo: torch.cuda.jiterator compiles CUDA C++ at run time and asserts "
              "'Jiterator is only supported on CUDA and ROCm GPUs'; there is no CPU reference to compare with")

GAPS: dict[str, str] = {
    "to_sparse": _NO_SPARSE.format(layout="Sparse", where="so Tensor.to_sparse() fails on sim"),
    "sparse.mm.reduce": _NO_SPARSE.format(
        layout="SparseCsr", where="so the sample inputs (Tensor.to_sparse_csr() on sim) cannot be made"),
    "sparse.sampled_addmm": _NO_SPARSE.format(
        layout="SparseCsr", where="so the sample inputs (Tensor.to_sparse_csr() on sim) cannot be made"),
    "jiterator_unary": _JITERATOR,
    "jiterator_binary": _JITERATOR,
    "jiterator_binary_return_by_ref": _JITERATOR,
    "jiterator_2inputs_2outputs": _JITERATOR,
    "jiterator_4inputs_with_extra_args": _JITERATOR,
}

_UNINITIALIZED = "returns uninitialized memory: its values differ between any two allocations, on CPU too"

SHAPES_ONLY: dict[str, str] = {
    "empty": _UNINITIALIZED,
    "empty_like": _UNINITIALIZED,
    "empty_permuted": _UNINITIALIZED,
    "empty_strided": _UNINITIALIZED,
    "new_empty": _UNINITIALIZED,
    "new_empty_strided": _UNINITIALIZED,
}


_LSTSQ = ("tolerance: the CPU's default driver for linalg.lstsq (MKL's gelsy) does not reproduce its own result "
          "bit for bit: on this machine two CPU runs of the same float64 input differed by 1e-15, as the sim run "
          "does, so there is no single CPU answer to match")

EXCEPTIONS: dict[tuple[str, str, str | None], str] = {
    ("linalg.lstsq", "forward", None): _LSTSQ,
    ("linalg.lstsq.grad_oriented", "forward", None): _LSTSQ,
}


def exception_kind(reason: str) -> str:
    """"skip", "tolerance" or "xfail" (an expected failure), from the reason's prefix."""
    for kind in ("skip", "tolerance"):
        if reason.startswith(kind + ":"):
            return kind
    return "xfail"


def op_allowlist(full: bool) -> tuple[str, ...] | None:
    """The OpInfo full names a run covers: the default subset, or None (every OpInfo) for the full sweep."""
    return None if full else DEFAULT_SUBSET


def comparison_mode(full_name: str, test: str, dtype: str | None) -> str:
    """How strictly `test` compares an OpInfo's results: "shapes", "tolerance" (an exception says why) or "exact"."""
    if full_name in SHAPES_ONLY:
        return "shapes"
    for key in ((full_name, test, None), (full_name, test, dtype)):
        if exception_kind(EXCEPTIONS.get(key, "")) == "tolerance":
            return "tolerance"
    return "exact"


def listed_reason(full_name: str) -> str | None:
    """The reason this configuration gives for an OpInfo (its gap, else its first exception), or None."""
    return GAPS.get(full_name) or next(
        (reason for (name, _, _), reason in EXCEPTIONS.items() if name == full_name), None)
