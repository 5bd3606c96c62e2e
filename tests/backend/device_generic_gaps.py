"""The sim backend's honest gap against PyTorch's OpInfo database: the ONE place for it.

tests/backend/test_device_generic.py runs every OpInfo on sim against the CPU, bit
for bit: forward in seven dtypes, backward in float64, and every bad-input case.
Nothing else in it skips, expects failures or loosens a comparison: each entry below
was observed, and its reason says why.

A reason that starts with "skip:" makes the test skip (the op cannot run at all,
crashes, hangs, or there is nothing to compare with); one that starts with
"tolerance:" compares at test_ops.py's test_compare_cpu tolerance (1e-3) instead of
bit for bit, for results the CPU itself does not reproduce bit for bit; any other
reason makes the test an expected failure, so the day the backend fixes it the test
reports an unexpected success and the entry must go.

`GAPS` maps an OpInfo's full name (name plus variant, e.g. "div.floor_rounding") to
a reason that holds for all three tests. `EXCEPTIONS` maps (full name, test, dtype)
to a reason for one test ("forward", "backward" or "error_inputs"), in one dtype
(e.g. "bfloat16") or in all (None).

`SHAPES_ONLY` maps the OpInfos whose output values are not defined to the reason;
for those the test compares only the structure, shapes, dtypes and devices of the
outputs. They count as passing and are listed here so that the weaker check is in
the same file. (Random ops are not here: sim's device generator draws the same
stream as the CPU generator from the same seed, so they are compared by value.)
"""
from __future__ import annotations

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


TESTS: tuple[str, ...] = ("forward", "backward", "error_inputs")

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
