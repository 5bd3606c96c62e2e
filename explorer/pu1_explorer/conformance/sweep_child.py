"""The process of an OpInfo sweep: `python -m pu1_explorer.conformance.sweep_child CONFIG` (CONFIG: JSON).

CONFIG holds `device`, `imports`, `limit` (sample inputs per operator, 0 for all) and `work`, a list of
[sweep, operator] pairs (sweep: "differential" or "bad inputs"). For each pair the process emits "start",
then "op" with the operator's status, counts of samples, a detail and the dtype it ran in; a crash between the
two costs the parent only that operator. "fatal" says the process could not start sweeping at all (with
`dependency` when a module the sweeps need is missing: not the backend's failure).
"""
from __future__ import annotations

import inspect
import json
import re
import sys
import time
import unittest
from typing import Any, Callable

from pu1_explorer.conformance.harness import (describe, emit, first_line, install_advice, missing_requirements,
                                              setup)

# Outputs with no defined value to compare: random draws differ between generators (ATen tags its random operators
# nondeterministic_seeded; the functional dropouts are composites of them), and empty memory is garbage.
RANDOM_COMPOSITES = frozenset({"nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
                               "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout"})
_EMPTY = re.compile(r"(^|[._])empty(_|$)")
_TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}  # test_ops.py's test_compare_cpu
# Positional arguments (by index after the input) that an operator takes as a CPU tensor on every device, as the
# OpInfo's samples made for a device keep them: tensor_split's tensor of indices or sections.
CPU_ARGUMENTS = {"tensor_split": (0,)}


def has_undefined_output(op: Any) -> bool:
    """True for an OpInfo whose output has no value to compare: a random draw or uninitialised memory."""
    if op.name in RANDOM_COMPOSITES or _EMPTY.search(op.name):
        return True
    import torch

    packet = getattr(torch.ops.aten, op.aten_name or op.name, None)
    return packet is not None and hasattr(packet, "overloads") and any(
        torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags for overload in packet.overloads())


def full_name(op: Any) -> str:
    """An OpInfo's name as op_db lists it: name.variant."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def to_device(value: Any, device: str) -> Any:
    """Tensors (in lists, tuples, named tuples and dicts) copied to `device`; a CPU device ("cpu" or a torch.device)
    becomes it. A strided tensor keeps its strides and storage offset over a copy of its whole storage: a partial
    view's operator may reach elements outside the view (as_strided)."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.layout != torch.strided or value.is_quantized or value.is_conj() or value.is_neg():
            return value.to(device)
        elements = value.untyped_storage().nbytes() // value.element_size()
        whole = value.as_strided((elements,), (1,), 0).to(device)
        return whole.as_strided(value.shape, value.stride(), value.storage_offset())
    if isinstance(value, (list, tuple)):
        converted = [to_device(v, device) for v in value]
        return type(value)(*converted) if hasattr(value, "_fields") else type(value)(converted)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, torch.device) and value.type == "cpu" or isinstance(value, str) and value == "cpu":
        return torch.device(device)
    return value


def names_the_device(sample: Any) -> bool:
    """Whether a CPU sample input has a tensor or names the CPU device: then its device run must give device outputs
    (a factory call without a device, such as arange(2), gives CPU tensors on both runs)."""
    import torch

    def found(value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            return any(found(v) for v in value)
        if isinstance(value, dict):
            return any(found(v) for v in value.values())
        return isinstance(value, (torch.Tensor, torch.device)) or isinstance(value, str) and value == "cpu"

    return found([sample.input, sample.args, sample.kwargs])


def pick_dtype(op: Any) -> Any:
    """The dtype an operator is swept in: float32 when the CPU supports it, else the first of a few."""
    import torch

    dtypes = op.supported_dtypes("cpu")
    if torch.float32 in dtypes:
        return torch.float32
    for candidate in (torch.int64, torch.bool, torch.float64, torch.complex64):
        if candidate in dtypes:
            return candidate
    return sorted(dtypes, key=str)[0] if dtypes else None


def op_status(counts: dict[str, int]) -> str:
    """An operator's status from its samples' counts: any mismatch, else any error, else passed or skipped."""
    if counts.get("mismatched"):
        return "mismatched"
    if counts.get("errored"):
        return "errored"
    if counts.get("passed"):
        return "passed"
    return "skipped"


def compare_outputs(actual: Any, expected: Any, device: str, placed: bool = True) -> None:
    """Assert that an operator's outputs on the device match the CPU's: placement (when the call was `placed` on the
    device), dtype, shape, values. One-byte floats (float8) compare as float32: assert_close has no tolerance for
    them."""
    import torch
    from torch.utils._pytree import tree_flatten

    flat_a, _ = tree_flatten(actual)
    flat_e, _ = tree_flatten(expected)
    if len(flat_a) != len(flat_e):
        raise AssertionError(f"{len(flat_a)} outputs on the device, {len(flat_e)} on the CPU")
    for a, e in zip(flat_a, flat_e):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"a {type(a).__name__} where the CPU returns a tensor")
            if placed and e.device.type == "cpu" and a.device.type != device:
                raise AssertionError(f"an output is on {a.device}, not on the device")
            if a.dtype != e.dtype or a.shape != e.shape:
                raise AssertionError(f"output {a.dtype} {tuple(a.shape)} where the CPU gives "
                                     f"{e.dtype} {tuple(e.shape)}")
            a, e = a.detach().cpu(), e.detach()
            if e.dtype.is_floating_point and e.dtype.itemsize == 1:
                a, e = a.float(), e.float()
            torch.testing.assert_close(a, e, equal_nan=True, check_stride=False, **_TOLERANCE)
        else:
            torch.testing.assert_close(a, e, equal_nan=True, **_TOLERANCE)


def differential(op: Any, device: str, limit: int) -> tuple[str, dict[str, int], str]:
    """Run an operator's sample inputs on the CPU and on the device and compare the results."""
    counts = {"passed": 0, "mismatched": 0, "errored": 0, "skipped": 0}
    detail = ""
    if has_undefined_output(op):
        return "skipped", counts, "random or uninitialised output: nothing to compare"
    dtype = pick_dtype(op)
    if dtype is None:
        return "skipped", counts, "no dtype on the CPU"
    for index, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
        if limit and index >= limit:
            break
        d_input = to_device(sample.input, device)
        d_args = tuple(arg if position in CPU_ARGUMENTS.get(op.name, ()) else to_device(arg, device)
                       for position, arg in enumerate(sample.args))
        d_kwargs = to_device(dict(sample.kwargs), device)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            counts["skipped"] += 1
            continue
        try:
            actual = op(d_input, *d_args, **d_kwargs)
        except Exception as error:
            counts["errored"] += 1
            detail = detail or f"{dtype}: {describe(error)}"
            continue
        try:
            compare_outputs(actual, expected, device, placed=names_the_device(sample))
        except AssertionError as error:
            counts["mismatched"] += 1
            detail = detail or f"{dtype}: {first_line(error)}"
            continue
        counts["passed"] += 1
    return op_status(counts), counts, detail or f"{dtype}"


def bad_inputs(op: Any, device: str, limit: int) -> tuple[str, dict[str, int], str]:
    """Run an operator's error inputs on the device: each must raise what the CPU raises for it."""
    counts = {"passed": 0, "mismatched": 0, "errored": 0, "skipped": 0}
    detail = ""
    if op.error_inputs_func is None:
        return "skipped", counts, "no error inputs"
    reference = list(op.error_inputs("cpu"))
    on_device = list(op.error_inputs(device))
    if len(reference) != len(on_device):
        reference = [None] * len(on_device)
    for index, (cpu_case, case) in enumerate(zip(reference, on_device)):
        if limit and index >= limit:
            break
        if cpu_case is not None:
            s = cpu_case.sample_input
            try:
                op(s.input, *s.args, **s.kwargs)
            except cpu_case.error_type:
                pass
            except Exception:
                counts["skipped"] += 1
                continue
            else:
                counts["skipped"] += 1  # not an error on the CPU either: a device-specific case
                continue
        s = case.sample_input
        try:
            op(s.input, *s.args, **s.kwargs)
        except case.error_type:
            counts["passed"] += 1
        except Exception as error:
            counts["errored"] += 1
            detail = detail or (f"raised {type(error).__name__} ({first_line(error)[:120]}), "
                                f"expected {case.error_type.__name__}")
        else:
            counts["mismatched"] += 1
            detail = detail or f"no error where the CPU raises {case.error_type.__name__}: {case.error_regex[:100]}"
    if not detail and counts["skipped"] and not counts["passed"]:
        detail = "the CPU raises the declared error for none of its error inputs (device-specific cases)"
    return op_status(counts), counts, detail


def extract_test_fn() -> Callable | None:
    """The running unittest's test function (None outside a test), found by walking the frames' locals.

    Answers as torch's `extract_test_fn` does, without its `inspect.stack()`, which reads the source lines of
    every frame; OpInfo calls it for every sample input, where it took most of a sweep's time.
    """
    try:
        frame = inspect.currentframe()
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, unittest.TestCase):
                *_, class_name, test_name = candidate.id().rsplit(".", 2)
                if class_name == type(candidate).__name__ and test_name.startswith("test"):
                    return getattr(candidate, test_name).__func__
            frame = frame.f_back
    except Exception:
        pass
    return None


def find_the_test_function_from_frames() -> None:
    """Make OpInfo's helpers use `extract_test_fn` (torch's own search is the slow part of a sweep)."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    for module in (common_utils, core):
        if hasattr(module, "extract_test_fn"):
            module.extract_test_fn = extract_test_fn


CHECKS = {"differential": differential, "bad inputs": bad_inputs}


def main(argv: list[str]) -> None:
    """Sweep the [sweep, operator] pairs of CONFIG, one message per operator."""
    config = json.loads(argv[0])
    try:
        torch = setup(config["device"], config["imports"])
    except BaseException as error:
        emit("fatal", detail=describe(error))
        return
    missing = missing_requirements()
    if missing:  # not the backend's failure: the operators are not run at all
        emit("fatal", detail="not run: " + install_advice(missing), dependency=True)
        return
    try:
        from torch.testing._internal.common_methods_invocations import op_db

        find_the_test_function_from_frames()
    except BaseException as error:
        emit("fatal", detail=describe(error))
        return
    by_name = {full_name(op): op for op in op_db}
    for kind, name in config["work"]:
        emit("start", sweep=kind, op=name)
        started = time.perf_counter()
        op = by_name.get(name)
        if op is None:
            emit("op", sweep=kind, op=name, status="skipped", counts={}, detail="not in this torch's op_db",
                 seconds=0.0)
            continue
        torch.manual_seed(0)
        dtype = ""
        try:
            if kind == "differential":
                dtype = str(pick_dtype(op) or "").removeprefix("torch.")
            status, counts, detail = CHECKS[kind](op, config["device"], config["limit"])
        except BaseException as error:
            status, counts, detail = "errored", {"errored": 1}, f"the sweep itself failed: {describe(error)}"
        emit("op", sweep=kind, op=name, status=status, counts=counts, detail=detail, dtype=dtype,
             seconds=round(time.perf_counter() - started, 3))


if __name__ == "__main__":
    main(sys.argv[1:])
