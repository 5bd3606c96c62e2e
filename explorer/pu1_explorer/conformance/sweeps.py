"""The OpInfo sweeps, the parent's side: which operators, chunks of them per process, and their results.

The differential sweep compares every sample input on the device with the CPU; the bad-input sweep runs
every `error_inputs` case and expects the device to raise like the CPU (`sweep_child` does both). A process
that crashes in the middle of a chunk costs only the operator it was running; the rest of the chunk
continues in a new process.
"""
from __future__ import annotations

import threading
from typing import Sequence

from pu1_explorer.conformance.processes import child_argv, ending, run_program
from pu1_explorer.conformance.results import OP_STATUSES, OpResult, ProbeResult

SWEEPS = {"opinfo differential": "differential", "opinfo bad inputs": "bad inputs"}  # probe name -> sweep kind
# The operators of the quick sweeps: a fixed cross-section of op_db (element-wise, comparison,
# reduction, sorting, linear algebra, shape and indexing, neural-network functions).
QUICK_OPS: tuple[str, ...] = (
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "exp", "log", "sqrt", "rsqrt", "sin", "tanh", "sigmoid",
    "abs", "neg", "clamp", "where", "lerp", "floor", "round", "remainder",
    "eq", "lt", "logical_and", "bitwise_and", "maximum",
    "sum", "mean", "prod", "amax", "argmax", "var", "std", "cumsum", "logsumexp",
    "sort", "topk", "max.reduction_with_dim", "nonzero", "unique",
    "matmul", "mm", "bmm", "addmm", "einsum",
    "cat", "stack", "reshape", "transpose", "permute", "flip", "roll", "tril", "index_select", "gather", "scatter",
    "masked_fill", "index_put", "repeat",
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.layer_norm", "softmax", "log_softmax",
    "nn.functional.gelu", "nn.functional.relu", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.mse_loss", "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.pad.constant",
)
# Those of QUICK_OPS whose OpInfo lists error inputs in torch 2.13: the quick bad-input sweep.
QUICK_ERROR_OPS: tuple[str, ...] = (
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "neg", "where", "remainder", "eq", "lt", "logical_and",
    "bitwise_and", "maximum", "mean", "amax", "cat", "reshape", "roll", "tril", "index_select", "gather", "scatter",
    "masked_fill", "nn.functional.conv2d", "nn.functional.gelu", "nn.functional.embedding", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
)
QUICK_SAMPLES = 8  # sample inputs per operator in the quick sweeps (all of them in the full sweeps)
# (sweep, operator) pairs per process; the two sweeps share processes. Each process imports op_db (2.7 s), so
# the quick sweeps (99 pairs) take one process, beside which the probes run.
SWEEP_CHUNK = 100
# What usually causes each kind of operator problem, per sweep; a sweep that did not pass shows the hint of its
# first problem kind in PROBLEM_ORDER.
SWEEP_HINTS: dict[str, dict[str, str]] = {
    "differential": {
        "crashed": "an operator killed the process: a kernel registered for PrivateUse1, or the fallback, reads or "
                   "writes outside its tensors' memory; run that operator alone to see the stack",
        "timed out": "an operator never returned: a kernel that waits on a stream, event or lock nothing releases",
        "errored": "an operator raised on the device and not on the CPU: no PrivateUse1 kernel and no boxed fallback "
                   "serves it, or a composite reaches an *_overrideable operator nobody registered",
        "mismatched": "a device result differs from the CPU's: a kernel or the copy (_copy_from) that ignores strides, "
                      "storage offsets, dtypes or broadcasting, or accumulates in a lower precision",
    },
    "bad inputs": {
        "crashed": "an invalid input crashed the process: a kernel that indexes or allocates before checking its "
                   "arguments",
        "timed out": "an invalid input never returned: a kernel that loops on a size or index it did not check",
        "errored": "an invalid input raised another error than the CPU's: a kernel that checks its arguments in "
                   "another order or with another error type (TORCH_CHECK_INDEX, TORCH_CHECK_VALUE, ...)",
        "mismatched": "an invalid input ran without error: the device's kernel skips the shape, dtype, index or "
                      "device checks the CPU kernel makes",
    },
}
PROBLEM_ORDER = ("crashed", "timed out", "errored", "mismatched")
_LOG_TAIL = 1500  # characters of a crashed sweep process's output kept per crash
_SWEEP_LOG = 6000  # characters of a sweep's log kept in its result


def sweep_ops(kind: str, mode: str) -> list[str]:
    """The operators a sweep covers: `QUICK_OPS` / `QUICK_ERROR_OPS`, or all of op_db (bad inputs: those with some)."""
    if mode == "quick":
        return list(QUICK_OPS if kind == "differential" else QUICK_ERROR_OPS)
    from torch.testing._internal.common_methods_invocations import op_db

    return [op.name + ("." + op.variant_test_name if op.variant_test_name else "") for op in op_db
            if kind == "differential" or op.error_inputs_func is not None]


def chunks(work: Sequence[tuple[str, str]], size: int = SWEEP_CHUNK) -> list[list[tuple[str, str]]]:
    """`work` cut into nearly equal chunks of at most `size` pairs (one process each, unless one crashes)."""
    parts = -(-len(work) // size)
    return [list(work[i * len(work) // parts:(i + 1) * len(work) // parts]) for i in range(parts)]


def sweep_chunk(work: Sequence[tuple[str, str]], device: str, imports: Sequence[str], env: dict[str, str],
                timeout: float, limit: int, stop: threading.Event | None = None
                ) -> tuple[dict[tuple[str, str], OpResult], dict[str, str]]:
    """Sweep (sweep kind, op) pairs in as many processes as crashes make necessary; a crash costs the pair it hit.

    Returns each pair's result and, per sweep kind, the output of the processes that crashed.
    """
    results: dict[tuple[str, str], OpResult] = {}
    logs: dict[str, str] = {}
    remaining = [tuple(item) for item in work]
    while remaining:
        config = {"work": remaining, "device": device, "imports": list(imports), "limit": limit}
        run = run_program(child_argv("sweep_child", config), env, timeout, renew_on="start", stop=stop)
        current = None
        for message in run.messages:
            if message["kind"] == "start":
                current = (message["sweep"], message["op"])
            elif message["kind"] == "op":
                results[(message["sweep"], message["op"])] = OpResult(
                    message["op"], message["status"], message.get("counts", {}), message.get("detail", ""),
                    message.get("seconds", 0.0), message.get("dtype", ""))
                current = None
            elif message["kind"] == "fatal":  # a missing dependency is no finding about the device: skipped
                status = "skipped" if message.get("dependency") else "errored"
                for item in remaining:
                    results.setdefault(item, OpResult(item[1], status, {}, message["detail"]))
        status, reason = ending(run, timeout)
        if current is not None:
            results[current] = OpResult(current[1], status, {}, reason, round(run.seconds, 3))
            logs[current[0]] = (logs.get(current[0], "") +
                                f"--- {current[1]}: {reason}\n{run.log.strip()[-_LOG_TAIL:]}\n")
        elif any(item not in results for item in remaining):
            for item in remaining:  # died before the first op: every op of the chunk goes with it
                results.setdefault(item, OpResult(item[1], status, {}, f"{reason} before the sweep started"))
                logs[item[0]] = f"--- {reason} before the sweep started\n{run.log.strip()[-_LOG_TAIL:]}\n"
        remaining = [item for item in remaining if item not in results]
    return results, logs


def sweep_result(name: str, kind: str, ops: list[OpResult], seconds: float, log: str) -> ProbeResult:
    """A sweep as one probe: passed when no operator mismatched, errored, crashed or timed out."""
    counts = {status: sum(op.status == status for op in ops) for status in OP_STATUSES}
    problems = {status: [op.name for op in ops if op.status == status]
                for status in ("mismatched", "errored", "crashed", "timed out")}
    compared = len(ops) - counts["skipped"]
    samples = sum(op.counts.get("passed", 0) for op in ops)
    what = "match the CPU" if kind == "differential" else "raise like the CPU"
    detail = f"{counts['passed']} of {compared} ops {what} ({samples} samples)"
    for status, names in problems.items():
        if names:
            detail += f"; {status}: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"
    if counts["skipped"]:
        detail += f"; {counts['skipped']} skipped"
    status = "passed" if compared and not any(problems.values()) else ("skipped" if not compared else "failed")
    if not compared and ops and len({op.detail for op in ops}) == 1:  # one reason for all: say it
        detail += f": {ops[0].detail}"
    counts["ops"] = len(ops)
    counts["samples passed"] = samples
    first_problem = next((kind_of for kind_of in PROBLEM_ORDER if problems[kind_of]), None)
    hint = SWEEP_HINTS[kind].get(first_problem, "") if first_problem else ""
    return ProbeResult(name, status, round(seconds, 3), detail, counts, ops, log[-_SWEEP_LOG:], hint)
