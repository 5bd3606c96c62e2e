"""A conformance scorecard for any PrivateUse1 device: each capability of the guide checked in a fresh process.

Every probe is a short Python program run in a fresh, time-limited process group, forked from a
template process that has imported torch (`forkserver.py`: about 0.1 s a process instead of 2 s;
backends load after the fork, as `import torch` would load them): it imports torch, then the
modules or files named in `imports` (for backends that `import torch` does not load by itself),
then checks one capability against the device by its name and reports one line. A probe that
dies of a signal is "crashed", one that outlives the time limit is killed with its whole process
group and is "timed out", so the scorecard always returns.

Two OpInfo sweeps run PyTorch's `op_db` in chunks of processes: the differential sweep
compares every sample input on the device with the CPU (at test_ops.py's `test_compare_cpu`
tolerance, 1e-3), the bad-input sweep runs every `error_inputs` case and expects the device to
raise like the CPU. A process that crashes in the middle of a chunk costs only the operator
it was running (reported "crashed"); the rest of the chunk continues in a new process.
`opinfo="quick"` sweeps `QUICK_OPS` (and, for bad inputs, `QUICK_ERROR_OPS`: those of them
that have error inputs), `QUICK_SAMPLES` sample inputs each; `"full"` the whole `op_db`, every
sample; `"none"` neither. The two sweeps share their processes (op_db takes seconds to import);
a sweep's time is the time spent in its operators. Random and uninitialised outputs
(`randn_like`, `dropout`, `empty`, ...) are skipped: there is no value to compare.

The child program is written to a file and run as a script: OpInfo's helpers call
`inspect.stack()`, which scans every module for each frame of `-c` code and made the bad-input
sweep 20 times slower.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import html
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pu1_explorer.forkserver import fork_server

STATUSES = ("passed", "failed", "skipped", "crashed", "timed out")
OP_STATUSES = ("passed", "mismatched", "errored", "crashed", "timed out", "skipped")
STATUS_COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#757575", "crashed": "#6a1b9a",
                  "timed out": "#ef6c00", "mismatched": "#c62828", "errored": "#ad1457"}
OPINFO_MODES = ("quick", "full", "none")
_MARK = "@@pu1-scorecard@@"

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
# Outputs with no defined value to compare (random draws differ between generators, empty memory is garbage).
_UNDEFINED_OUTPUT = ("rand", "bernoulli", "dropout", "multinomial", "normal", "uniform", "exponential", "geometric",
                     "cauchy", "log_normal", "empty", "poisson")


@dataclass
class OpResult:
    """One operator of an OpInfo sweep: its status and how many sample inputs ended each way."""

    name: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0


@dataclass
class ProbeResult:
    """One probe: the capability (guide step) it checks, its status, time, a one-line detail, counts for sweeps."""

    name: str
    capability: str
    status: str
    seconds: float
    detail: str
    counts: dict[str, int] = field(default_factory=dict)
    ops: list[OpResult] = field(default_factory=list)
    log: str = ""


@dataclass
class Scorecard:
    """Every probe's result for one device."""

    device: str
    torch_version: str
    started: str
    seconds: float
    probes: list[ProbeResult]
    imports: list[str] = field(default_factory=list)
    opinfo: str = "quick"

    def summary(self) -> dict[str, int]:
        """How many probes ended in each status."""
        return {status: sum(probe.status == status for probe in self.probes) for status in STATUSES}

    def probe(self, name: str) -> ProbeResult:
        """The result of the probe called `name`."""
        for result in self.probes:
            if result.name == name:
                return result
        raise KeyError(f"no probe {name!r} in this scorecard")

    def to_dict(self) -> dict:
        """Plain data (what `to_json` writes)."""
        return {"schema_version": 1, **asdict(self), "summary": self.summary()}

    def to_json(self, indent: int | None = 1) -> str:
        """The scorecard as JSON (read it back with `Scorecard.from_json`)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Scorecard":
        """A scorecard from the text `to_json` wrote."""
        data = json.loads(text)
        probes = [ProbeResult(**{**probe, "ops": [OpResult(**op) for op in probe.get("ops", [])]})
                  for probe in data["probes"]]
        return cls(device=data["device"], torch_version=data["torch_version"], started=data["started"],
                   seconds=data["seconds"], probes=probes, imports=data.get("imports", []),
                   opinfo=data.get("opinfo", "quick"))

    def to_junit_xml(self) -> str:
        """JUnit XML: one testsuite of capability probes, one per OpInfo sweep with a testcase per operator."""
        root = ElementTree.Element("testsuites", name=f"PrivateUse1 scorecard: {self.device}",
                                   time=f"{self.seconds:.3f}")
        suite = ElementTree.SubElement(root, "testsuite", name=f"scorecard.{self.device}", timestamp=self.started)
        cases: list[tuple[ElementTree.Element, str]] = [(suite, "")]
        for probe in self.probes:
            case = ElementTree.SubElement(suite, "testcase", name=probe.name, classname=f"scorecard.{self.device}",
                                          time=f"{probe.seconds:.3f}")
            _junit_outcome(case, probe.status, probe.detail, probe.log)
            if probe.ops:
                sweep = ElementTree.SubElement(root, "testsuite", name=f"scorecard.{self.device}.{probe.name}",
                                               timestamp=self.started)
                for op in probe.ops:
                    op_case = ElementTree.SubElement(sweep, "testcase", name=op.name,
                                                     classname=f"scorecard.{self.device}.{probe.name}",
                                                     time=f"{op.seconds:.3f}")
                    _junit_outcome(op_case, op.status, op.detail, "")
                cases.append((sweep, probe.name))
        for element, _ in cases:
            testcases = element.findall("testcase")
            element.set("tests", str(len(testcases)))
            for kind, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                element.set(attribute, str(sum(case.find(kind) is not None for case in testcases)))
            element.set("time", f"{sum(float(case.get('time', 0)) for case in testcases):.3f}")
        ElementTree.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"

    def to_html(self) -> str:
        """One self-contained page (no scripts, no network): a summary, a table coloured by status, the details."""
        summary = self.summary()
        badges = " ".join(f'{_badge(status)} <b>{count}</b>' for status, count in summary.items() if count)
        imports = f" after importing <code>{_escape(', '.join(self.imports))}</code>" if self.imports else ""
        rows = "".join(
            f"<tr><td style='border-left:5px solid {STATUS_COLOURS.get(probe.status, '#555')}'>"
            f"{_escape(probe.capability)}</td><td><a href='#{_anchor(probe.name)}'>"
            f"{_escape(probe.name)}</a></td><td>{_badge(probe.status)}</td><td class='num'>{probe.seconds:.1f} s</td>"
            f"<td>{_escape(probe.detail)}</td></tr>" for probe in self.probes)
        details = "".join(_probe_details_html(probe) for probe in self.probes)
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>PrivateUse1 scorecard: {_escape(self.device)}</title>
<style>{PAGE_CSS}</style></head>
<body>
<h1>PrivateUse1 scorecard: <code>{_escape(self.device)}</code></h1>
<p class="summary">{badges}</p>
<p>{len(self.probes)} probes on <code>{_escape(self.device)}</code>{imports}, torch {_escape(self.torch_version)},
started {_escape(self.started)}, {self.seconds:.1f} s; OpInfo sweeps: {_escape(self.opinfo)}.
Each probe ran in a fresh, time-limited process.</p>
<table class="scorecard"><thead><tr><th>guide step</th><th>probe</th><th>status</th><th>time</th><th>detail</th>
</tr></thead><tbody>{rows}</tbody></table>
<h2>Details</h2>
{details}
</body></html>
"""


PAGE_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em;
color:#1f2328}
table{border-collapse:collapse;width:100%;font-size:.92em}th,td{border-bottom:1px solid #ddd;padding:.3em .5em;
text-align:left;vertical-align:top}td.num{text-align:right;white-space:nowrap}
.badge{display:inline-block;color:#fff;border-radius:3px;padding:0 .45em;font-size:.85em;white-space:nowrap}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;font-size:.8em}details{margin:.3em 0}
summary{cursor:pointer}
"""


def _escape(text: object) -> str:
    return html.escape(str(text))


def _anchor(name: str) -> str:
    """An HTML id for a probe: letters and digits, the rest as dashes."""
    return "probe-" + "".join(c if c.isalnum() else "-" for c in name.lower())


def _badge(status: str) -> str:
    """A status as a coloured label."""
    return f'<span class="badge" style="background:{STATUS_COLOURS.get(status, "#555")}">{_escape(status)}</span>'


def _probe_details_html(probe: ProbeResult) -> str:
    parts = [f"<h3 id='{_anchor(probe.name)}'>{_escape(probe.name)} {_badge(probe.status)}</h3>",
             f"<p>{_escape(probe.capability)}: {_escape(probe.detail)}</p>"]
    if probe.counts:
        parts.append("<p>" + ", ".join(f"{_escape(key)}: {value}" for key, value in probe.counts.items()) + "</p>")
    if probe.ops:
        problems = [op for op in probe.ops if op.status not in ("passed", "skipped")]
        rows = "".join(f"<tr><td><code>{_escape(op.name)}</code></td><td>{_badge(op.status)}</td>"
                       f"<td>{_escape(', '.join(f'{k} {v}' for k, v in op.counts.items() if v))}</td>"
                       f"<td>{_escape(op.detail)}</td></tr>" for op in problems + [op for op in probe.ops
                                                                                      if op not in problems])
        parts.append(f"<details{' open' if problems else ''}><summary>{len(probe.ops)} operators "
                     f"({len(problems)} with problems)</summary><table><thead><tr><th>operator</th><th>status</th>"
                     f"<th>samples</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table></details>")
    if probe.log:
        parts.append(f"<details><summary>output of the process</summary><pre>{_escape(probe.log)}</pre></details>")
    return "".join(parts)


def _junit_outcome(case: ElementTree.Element, status: str, detail: str, log: str) -> None:
    """The failure, error or skipped element JUnit expects for a status."""
    if status in ("failed", "mismatched"):
        ElementTree.SubElement(case, "failure", message=detail, type=status).text = detail
    elif status in ("crashed", "timed out", "errored"):
        ElementTree.SubElement(case, "error", message=detail, type=status).text = detail
    elif status == "skipped":
        ElementTree.SubElement(case, "skipped", message=detail)
    if log:
        ElementTree.SubElement(case, "system-err").text = log


@dataclass(frozen=True)
class Probe:
    """A capability check: Python statements run in a fresh process with `torch`, `device` (the name),
    `module` (torch.<name> or None), `imports`, and the helpers `compare(actual, expected, what)`,
    `skip(reason)`, `report(detail, **counts)`; an AssertionError or any exception fails it."""

    name: str
    capability: str
    code: str
    uses_imports: bool = True


_GUIDE = {
    "device_module": "1. device module", "hooks": "2. hooks", "guard": "3. guard", "allocator": "4. allocator",
    "operators": "5. operators", "streams_events": "6. streams and events", "generator": "7. generator",
    "autograd": "8. autograd", "amp": "9. AMP", "serialization": "10. serialization", "autoload": "11. autoload",
    "profiler": "12. profiler", "compile": "13. compile", "distributed": "14. distributed",
}


def _probe(name: str, step: str, code: str, uses_imports: bool = True) -> Probe:
    return Probe(name, _GUIDE[step], textwrap.dedent(code).strip() + "\n", uses_imports)


PROBES: tuple[Probe, ...] = (
    _probe("device module", "device_module", """
        assert module is not None, f"torch.{device} is not registered (torch._register_device_module)"
        wanted = ("is_available", "device_count", "current_device", "set_device")
        missing = [f for f in wanted if not hasattr(module, f)]
        assert not missing, f"torch.{device} lacks {', '.join(missing)}"
        assert module.is_available() is True, f"torch.{device}.is_available() is {module.is_available()!r}"
        count = module.device_count()
        assert isinstance(count, int) and count >= 1, f"torch.{device}.device_count() is {count!r}"
        assert module.current_device() == 0, f"current_device() is {module.current_device()!r} at start"
        assert torch.empty(1, device=device).device == torch.device(device, 0)
        if count >= 2:
            module.set_device(1)
            assert module.current_device() == 1, "set_device(1) did not change current_device()"
            assert torch.empty(1, device=device).device == torch.device(device, 1), "a new tensor is not on :1"
            module.set_device(0)
        report(f"{count} device(s): is_available, device_count, current_device and set_device agree")
    """),
    _probe("torch.accelerator", "hooks", """
        acc = torch.accelerator
        assert acc.is_available(), "torch.accelerator.is_available() is False"
        current = acc.current_accelerator()
        assert current is not None and current.type == device, f"current_accelerator() is {current!r}"
        count = acc.device_count()
        assert module is None or count == module.device_count(), f"device_count() {count} != torch.{device}'s"
        acc.synchronize()
        acc.synchronize(0)
        assert acc.current_device_index() == 0, f"current_device_index() is {acc.current_device_index()}"
        if count >= 2:
            acc.set_device_index(1)
            assert acc.current_device_index() == 1, "set_device_index(1) did not change current_device_index()"
            acc.set_device_index(0)
        report(f"current_accelerator() is {current}, {count} device(s), synchronize works")
    """),
    _probe("devices and guard", "guard", """
        count = torch.accelerator.device_count()
        if count < 2:
            skip(f"{count} device: needs two")
        a = torch.arange(6.0, device=f"{device}:1")
        assert a.device == torch.device(device, 1), f"a tensor made on :1 is on {a.device}"
        with torch.device(f"{device}:1"):
            b = torch.ones(3)
        assert b.device == torch.device(device, 1), f"with torch.device(':1') made a tensor on {b.device}"
        assert torch.accelerator.current_device_index() == 0
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1, "device_index(1) did not switch"
            c = torch.empty(2, device=device)
        assert c.device == torch.device(device, 1), f"inside device_index(1) a new tensor is on {c.device}"
        assert torch.accelerator.current_device_index() == 0, "device_index(1) did not restore the device"
        assert (a + a).device == torch.device(device, 1), "an op on :1 tensors ran elsewhere"
        d = a.to(f"{device}:0")
        assert d.device == torch.device(device, 0)
        compare(d, torch.arange(6.0), "copy :1 -> :0")
        compare(d.to(f"{device}:1") * 2, torch.arange(6.0) * 2, "copy :0 -> :1")
        try:
            a + d
        except RuntimeError:
            pass
        else:
            raise AssertionError("adding a tensor on :1 to one on :0 did not raise")
        report("tensors on :1, torch.device and device_index contexts, copies across devices, mixing refused")
    """),
    _probe("allocator statistics", "allocator", """
        acc = torch.accelerator
        MiB = 1 << 20
        acc.synchronize()
        base = acc.memory_allocated(0)
        x = torch.empty(MiB, dtype=torch.uint8, device=f"{device}:0")
        grown = acc.memory_allocated(0) - base
        assert grown >= MiB, f"memory_allocated grew by {grown} bytes for a 1 MiB tensor"
        y = torch.empty(2 * MiB, dtype=torch.uint8, device=f"{device}:0")
        peak = acc.max_memory_allocated(0)
        assert peak >= base + 3 * MiB, f"max_memory_allocated {peak} < {base + 3 * MiB} with 3 MiB live"
        del x, y
        after = acc.memory_allocated(0)
        assert after < base + MiB, f"memory_allocated still {after - base} bytes above the start after del"
        assert acc.max_memory_allocated(0) >= peak, "the peak dropped without a reset"
        acc.reset_peak_memory_stats(0)
        assert acc.max_memory_allocated(0) < base + MiB, "reset_peak_memory_stats did not reset the peak"
        report(f"memory_allocated +{grown} bytes for 1 MiB, peak {peak - base} bytes above the start, freed on del")
    """),
    _probe("operators", "operators", """
        x = torch.randn(4, 5)
        d = x.to(device)
        assert d.device.type == device, f"x.to({device!r}) is on {d.device}"
        compare(d, x, "copy to the device")
        compare(d + 1, x + 1, "add")
        compare((d * d).sum(), (x * x).sum(), "mul and sum")
        compare(d.t() @ d, x.t() @ x, "matmul")
        compare(d[1:3, ::2].contiguous(), x[1:3, ::2].contiguous(), "strided view")
        compare(torch.cat([d, d.relu()]), torch.cat([x, x.relu()]), "cat")
        e = d.clone()
        e.add_(2)
        compare(e, x + 2, "in-place add")
        assert abs(d.sum().item() - x.sum().item()) < 1e-4, ".item() differs from the CPU"
        assert device in repr(d), "repr() of a device tensor does not name the device"
        report("copies, element-wise ops, reductions, matmul, views, cat, in-place ops and .item() match the CPU")
    """),
    _probe("streams and events", "streams_events", """
        s = torch.Stream(device=device)
        assert s.device.type == device, f"torch.Stream(device={device!r}) is on {s.device}"
        start = torch.Event(device=device, enable_timing=True)
        end = torch.Event(device=device, enable_timing=True)
        x = torch.randn(128, 128, device=device)
        previous = torch.accelerator.current_stream()
        torch.accelerator.set_stream(s)
        assert torch.accelerator.current_stream() == s, "set_stream did not make the stream current"
        start.record(s)
        y = x @ x
        end.record(s)
        torch.accelerator.set_stream(previous)
        end.synchronize()
        assert end.query(), "an event reports unfinished work after synchronize()"
        previous.wait_event(end)
        previous.wait_stream(s)
        s.synchronize()
        assert s.query(), "a stream reports unfinished work after synchronize()"
        recorded = s.record_event()
        recorded.synchronize()
        assert recorded.query()
        elapsed = start.elapsed_time(end)
        assert elapsed >= 0, f"elapsed_time is {elapsed}"
        compare(y, x.cpu() @ x.cpu(), "matmul on a side stream")
        report(f"stream {s.stream_id}: record, wait, synchronize, query; {elapsed:.3f} ms between events")
    """),
    _probe("generator", "generator", """
        g = torch.Generator(device=device)
        assert g.device.type == device, f"torch.Generator(device={device!r}).device is {g.device}"
        g.manual_seed(1234)
        a = torch.randn(1000, device=device, generator=g)
        g.manual_seed(1234)
        b = torch.randn(1000, device=device, generator=g)
        assert torch.equal(a.cpu(), b.cpu()), "the same seed gave different draws"
        c = torch.randn(1000, device=device, generator=g)
        assert not torch.equal(b.cpu(), c.cpu()), "two draws in a row are equal"
        assert abs(a.mean().item()) < 0.2 and 0.8 < a.std().item() < 1.2, "randn does not look standard normal"
        state = g.get_state()
        d = torch.rand(10, device=device, generator=g)
        g.set_state(state)
        compare(torch.rand(10, device=device, generator=g), d.cpu(), "draw after set_state")
        torch.manual_seed(7)
        e = torch.randn(10, device=device)
        torch.manual_seed(7)
        compare(torch.randn(10, device=device), e.cpu(), "draw after torch.manual_seed")
        checked = "Generator seeds and get_state/set_state, torch.manual_seed"
        if module is not None and hasattr(module, "get_rng_state"):
            state = module.get_rng_state()
            f = torch.randn(10, device=device)
            module.set_rng_state(state)
            compare(torch.randn(10, device=device), f.cpu(), f"draw after torch.{device}.set_rng_state")
            checked += f", torch.{device}.get_rng_state/set_rng_state"
        report(checked + " reproduce draws")
    """),
    _probe("pinned memory", "hooks", """
        t = torch.randn(1000)
        assert not t.is_pinned(), "a plain CPU tensor reports pinned"
        p = t.pin_memory()
        assert p.is_pinned(), "pin_memory() returned a tensor that is not pinned"
        assert torch.equal(p, t)
        d = p.to(device, non_blocking=True)
        torch.accelerator.synchronize()
        compare(d, t, "non-blocking copy from pinned memory")
        q = torch.empty(1000, pin_memory=True)
        assert q.is_pinned(), "torch.empty(pin_memory=True) is not pinned"
        q.copy_(d, non_blocking=True)
        torch.accelerator.synchronize()
        assert torch.equal(q, t), "non-blocking copy back into pinned memory differs"
        report("pin_memory(), is_pinned() and non-blocking copies both ways")
    """),
    _probe("autograd on layers", "autograd", """
        import copy
        torch.manual_seed(0)
        checked = 0
        def check(name, layer, inputs):
            global checked
            on_device = copy.deepcopy(layer).to(device)
            device_inputs = [i.detach().to(device).requires_grad_(i.requires_grad) for i in inputs]
            expected, actual = layer(*inputs), on_device(*device_inputs)
            compare(actual, expected, f"{name} forward")
            grad = torch.randn_like(expected)
            expected.backward(grad)
            actual.backward(grad.to(device))
            for (pname, p), (_, q) in zip(layer.named_parameters(), on_device.named_parameters()):
                compare(q.grad, p.grad, f"{name} gradient of {pname}")
                checked += 1
            for i, (cpu_input, device_input) in enumerate(zip(inputs, device_inputs)):
                if cpu_input.requires_grad:
                    compare(device_input.grad, cpu_input.grad, f"{name} gradient of input {i}")
                    checked += 1
        check("Linear", torch.nn.Linear(16, 8), [torch.randn(4, 16, requires_grad=True)])
        check("Conv2d", torch.nn.Conv2d(3, 4, 3, padding=1), [torch.randn(2, 3, 8, 8, requires_grad=True)])
        check("LayerNorm", torch.nn.LayerNorm(16), [torch.randn(4, 16, requires_grad=True)])
        check("Embedding", torch.nn.Embedding(10, 6), [torch.tensor([[1, 2, 3], [3, 9, 0]])])
        report(f"Linear, Conv2d, LayerNorm, Embedding: outputs and {checked} gradients match the CPU",
               gradients=checked)
    """),
    _probe("autocast (AMP)", "amp", """
        assert torch.amp.is_autocast_available(device), f"torch.amp.is_autocast_available({device!r}) is False"
        assert module is not None and hasattr(module, "get_amp_supported_dtype"), \
            f"torch.{device}.get_amp_supported_dtype is missing"
        supported = module.get_amp_supported_dtype()
        lower = [dt for dt in supported if dt in (torch.float16, torch.bfloat16)]
        assert lower, f"get_amp_supported_dtype() lists no lower precision: {supported}"
        a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
        assert (a @ b).dtype == torch.float32
        for dt in lower:
            with torch.autocast(device, dtype=dt):
                assert torch.is_autocast_enabled(device), "is_autocast_enabled is False inside autocast"
                assert torch.get_autocast_dtype(device) == dt
                y = a @ b
                z = torch.nn.functional.linear(a, b)
            assert y.dtype == dt, f"a matmul under autocast({device}, {dt}) gives {y.dtype}"
            assert z.dtype == dt, f"linear under autocast({device}, {dt}) gives {z.dtype}"
            compare(y.float(), a.cpu() @ b.cpu(), f"matmul in {dt}", rtol=2e-2, atol=1e-1)
        with torch.autocast(device):
            default = torch.get_autocast_dtype(device)
            assert (a @ b).dtype == default, f"matmul under autocast({device}) is not in the default {default}"
        assert (a @ b).dtype == torch.float32, "autocast stayed on after the block"
        report(f"supported {[str(dt) for dt in supported]}; matmul and linear follow autocast's dtype "
               f"(default {default})")
    """),
    _probe("serialization", "serialization", """
        import io
        x = torch.randn(5, 3, device=f"{device}:0")
        saved = {"x": x, "view": x[1:3]}
        count = torch.accelerator.device_count()
        if count >= 2:
            saved["y"] = torch.arange(4.0, device=f"{device}:1")
        buffer = io.BytesIO()
        torch.save(saved, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
        assert loaded["x"].device == x.device, f"a tensor saved on {x.device} loads on {loaded['x'].device}"
        compare(loaded["x"], x.cpu(), "loaded values")
        compare(loaded["view"], x[1:3].cpu(), "loaded view")
        shared = loaded["view"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
        assert shared, "a view and its base no longer share storage after loading"
        if "y" in saved:
            assert loaded["y"].device == torch.device(device, 1), f"a tensor saved on :1 loads on {loaded['y'].device}"
        buffer.seek(0)
        on_cpu = torch.load(buffer, map_location="cpu")
        assert on_cpu["x"].device.type == "cpu", "map_location='cpu' did not load on the CPU"
        assert torch.equal(on_cpu["x"], x.cpu())
        layer = torch.nn.Linear(4, 2).to(device)
        buffer = io.BytesIO()
        torch.save(layer.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer)
        assert all(t.device.type == device for t in state.values()), "a state_dict did not load on the device"
        other = torch.nn.Linear(4, 2).to(device)
        other.load_state_dict(state)
        inputs = torch.randn(3, 4, device=device)
        compare(other(inputs), layer(inputs).cpu(), "a layer loaded from a state_dict")
        report("torch.save/torch.load keep device, values and shared storage; map_location='cpu'; state_dict")
    """),
    _probe("autoload", "autoload", """
        import importlib.metadata
        name = torch._C._get_privateuse1_backend_name()
        disabled = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0"
        if name != device:
            reason = f"a fresh `import torch` alone does not register {device!r} (PrivateUse1 is still {name!r})"
            if disabled:
                reason += "; TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set"
            if imports:
                reason += f"; the backend needs `import {', '.join(imports)}`"
            raise AssertionError(reason)
        assert hasattr(torch, device), f"PrivateUse1 is named {device!r} but torch.{device} is missing"
        assert torch.ones(2, device=device).device.type == device
        entry_points = [ep.value for ep in importlib.metadata.entry_points(group="torch.backends")]
        names = ", ".join(entry_points) or "none"
        report(f"`import torch` registers {device!r} (entry points in torch.backends: {names})")
    """, uses_imports=False),
    _probe("attention", "operators", """
        import torch.nn.functional as F
        torch.manual_seed(0)
        for causal in (False, True):
            q, k, v = (torch.randn(2, 3, 8, 16, requires_grad=True) for _ in range(3))
            qd, kd, vd = (t.detach().to(device).requires_grad_() for t in (q, k, v))
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            actual = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
            compare(actual, expected, f"forward (is_causal={causal})")
            grad = torch.randn_like(expected)
            expected.backward(grad)
            actual.backward(grad.to(device))
            for name, cpu_t, device_t in (("q", q, qd), ("k", k, kd), ("v", v, vd)):
                compare(device_t.grad, cpu_t.grad, f"gradient of {name} (is_causal={causal})")
        report("scaled_dot_product_attention forward and backward match the CPU, causal or not")
    """),
    _probe("RNNs", "operators", """
        import copy
        torch.manual_seed(0)
        for kind in (torch.nn.LSTM, torch.nn.GRU):
            layer = kind(8, 16, num_layers=2, batch_first=True)
            on_device = copy.deepcopy(layer).to(device)
            x = torch.randn(3, 5, 8, requires_grad=True)
            xd = x.detach().to(device).requires_grad_()
            out, _ = layer(x)
            out_d, _ = on_device(xd)
            compare(out_d, out, f"{kind.__name__} forward")
            out.pow(2).sum().backward()
            out_d.pow(2).sum().backward()
            compare(xd.grad, x.grad, f"{kind.__name__} gradient of the input")
            for (name, p), (_, q) in zip(layer.named_parameters(), on_device.named_parameters()):
                compare(q.grad, p.grad, f"{kind.__name__} gradient of {name}")
        report("nn.LSTM and nn.GRU (2 layers) forward and backward match the CPU")
    """),
    _probe("profiler", "profiler", """
        from torch.profiler import ProfilerActivity, profile
        x = torch.randn(64, 64, device=device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            for _ in range(3):
                x = (x @ x).tanh()
            torch.accelerator.synchronize()
        events = prof.events()
        on_device = [e for e in events if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        assert on_device, f"none of the {len(events)} profiler events is on the device (DeviceType.PrivateUse1)"
        negative = [e.name for e in on_device if e.device_time_total < 0]
        assert not negative, f"negative device times: {negative[:3]}"
        names = sorted({e.name for e in on_device})
        report(f"{len(on_device)} device events ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})",
               device_events=len(on_device))
    """),
    _probe("torch.compile", "compile", """
        def f(x, y):
            return torch.sin(x) * y + y.relu().sum(dim=0)
        compiled = torch.compile(f)
        for n in (8, 8):
            x, y = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
            out = compiled(x, y)
            assert out.device.type == device, f"the compiled function returned a tensor on {out.device}"
            compare(out, f(x, y).cpu(), "compiled against eager")
        report("torch.compile (default backend) gives eager's result on the device")
    """),
    _probe("distributed", "distributed", """
        import torch.distributed as dist
        if not dist.is_available():
            skip("torch.distributed is not available in this build")
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
        try:
            config = dist.get_backend_config()
            backend = next((part.split(":", 1)[1] for part in config.split(",") if part.startswith(device + ":")),
                           config)
            t = torch.arange(4.0, device=device)
            dist.all_reduce(t)
            assert t.device.type == device
            compare(t, torch.arange(4.0), "all_reduce on one rank")
            gathered = [torch.empty(4, device=device)]
            dist.all_gather(gathered, t)
            compare(gathered[0], torch.arange(4.0), "all_gather on one rank")
        finally:
            dist.destroy_process_group()
        report(f"a 1-rank group with the default backend ({backend} for {device}) all_reduces and all_gathers")
    """),
)

PROBE_NAMES: tuple[str, ...] = tuple(p.name for p in PROBES) + ("opinfo differential", "opinfo bad inputs")


# --------------------------------------------------------------------------------------------
# What runs in the child processes.

_HARNESS = r'''
import json, os, sys, time, traceback
_MARK = "@@pu1-scorecard@@"

def _emit(kind, **data):
    sys.__stdout__.write(_MARK + json.dumps({"kind": kind, **data}) + "\n")
    sys.__stdout__.flush()

class _Skip(Exception):
    pass

def skip(reason):
    raise _Skip(reason)

_REPORT = {}

def report(detail, **counts):
    _REPORT["detail"] = str(detail)
    _REPORT["counts"] = counts

def _first_line(error):
    text = str(error).strip()
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (line[:300] + "...") if len(line) > 300 else line

def _describe(error, code=None, filename=None):
    message = _first_line(error)
    if not message and code is not None:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
        if frames:
            message = "failed: " + code.splitlines()[frames[-1].lineno - 1].strip()
    if isinstance(error, AssertionError):
        return message or "assertion failed"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__

def compare(actual, expected, what="", rtol=1e-3, atol=1e-3):
    import torch
    if isinstance(actual, torch.Tensor):
        on_cpu = isinstance(expected, torch.Tensor) and expected.device.type == "cpu"
        if DEVICE is not None and actual.device.type != DEVICE and on_cpu:
            raise AssertionError(f"{what}: the result is on {actual.device}, not on {DEVICE}")
        actual = actual.detach().cpu()
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().cpu()
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
    except AssertionError as error:
        raise AssertionError(f"{what}: {_first_line(error)}" if what else _first_line(error)) from None

def _import(spec):
    import importlib, importlib.util
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = os.path.abspath(spec)
        name = os.path.splitext(os.path.basename(path))[0]
        found = importlib.util.spec_from_file_location(name, path)
        if found is None or not os.path.exists(path):
            raise ImportError(f"no such file: {spec}")
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        found.loader.exec_module(module)
    else:
        importlib.import_module(spec)

DEVICE = None

def _setup(config, use_imports=True):
    global DEVICE
    import torch
    if use_imports:
        for spec in config["imports"]:
            try:
                _import(spec)
            except BaseException as error:
                raise RuntimeError(f"import {spec} failed: {_describe(error)}") from None
    DEVICE = config["device"]
    return torch
'''

_PROBE_MAIN = r'''
def _main(config):
    started = time.perf_counter()
    code = config["code"]
    filename = "<probe>"
    try:
        torch = _setup(config, config["uses_imports"])
        namespace = {"torch": torch, "device": config["device"], "module": getattr(torch, config["device"], None),
                     "imports": config["imports"], "compare": compare, "skip": skip, "report": report, "os": os,
                     "__name__": "__probe__"}
        exec(compile(code, filename, "exec"), namespace)
    except _Skip as reason:
        _emit("result", status="skipped", detail=str(reason))
    except BaseException as error:
        _emit("result", status="failed", detail=_describe(error, code, filename))
    else:
        _emit("result", status="passed", detail=_REPORT.get("detail", "passed"), counts=_REPORT.get("counts", {}))
'''

_SWEEP_MAIN = r'''
_UNDEFINED = tuple(json.loads(os.environ.get("PU1_SCORECARD_UNDEFINED", "[]")))

def _full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")

def _to_device(value, device):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, (list, tuple)):
        converted = [_to_device(v, device) for v in value]
        return type(value)(converted) if not hasattr(value, "_fields") else type(value)(*converted)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device(device)
    return value

def _device_kwargs(kwargs, device):
    kwargs = _to_device(kwargs, device)
    if kwargs.get("device") in ("cpu",):
        kwargs["device"] = device
    return kwargs

def _pick_dtype(op):
    import torch
    dtypes = op.supported_dtypes("cpu")
    if torch.float32 in dtypes:
        return torch.float32
    for candidate in (torch.int64, torch.bool, torch.float64, torch.complex64):
        if candidate in dtypes:
            return candidate
    return sorted(dtypes, key=str)[0] if dtypes else None

def _differential(op, device, limit):
    import torch
    counts = {"passed": 0, "mismatched": 0, "errored": 0, "skipped": 0}
    detail = ""
    if any(word in op.name for word in _UNDEFINED):
        return "skipped", counts, "random or uninitialised output: nothing to compare"
    dtype = _pick_dtype(op)
    if dtype is None:
        return "skipped", counts, "no dtype on the CPU"
    samples = op.sample_inputs("cpu", dtype, requires_grad=False)
    for index, sample in enumerate(samples):
        if limit and index >= limit:
            break
        d_input = _to_device(sample.input, device)
        d_args = _to_device(sample.args, device)
        d_kwargs = _device_kwargs(dict(sample.kwargs), device)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            counts["skipped"] += 1
            continue
        try:
            actual = op(d_input, *d_args, **d_kwargs)
        except Exception as error:
            counts["errored"] += 1
            detail = detail or f"{dtype}: {_describe(error)}"
            continue
        try:
            _compare_outputs(actual, expected, device)
        except AssertionError as error:
            counts["mismatched"] += 1
            detail = detail or f"{dtype}: {_first_line(error)}"
            continue
        counts["passed"] += 1
    return _op_status(counts), counts, detail or f"{dtype}"

def _compare_outputs(actual, expected, device):
    import torch
    from torch.utils._pytree import tree_flatten
    flat_a, spec_a = tree_flatten(actual)
    flat_e, spec_e = tree_flatten(expected)
    if len(flat_a) != len(flat_e):
        raise AssertionError(f"{len(flat_a)} outputs on the device, {len(flat_e)} on the CPU")
    for a, e in zip(flat_a, flat_e):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"a {type(a).__name__} where the CPU returns a tensor")
            if e.device.type == "cpu" and a.device.type != device:
                raise AssertionError(f"an output is on {a.device}, not on the device")
            if a.dtype != e.dtype or a.shape != e.shape:
                raise AssertionError(f"output {a.dtype} {tuple(a.shape)} where the CPU gives "
                                     f"{e.dtype} {tuple(e.shape)}")
            torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=1e-3, atol=1e-3, equal_nan=True,
                                       check_stride=False)
        else:
            torch.testing.assert_close(a, e, rtol=1e-3, atol=1e-3, equal_nan=True)

def _op_status(counts):
    if counts.get("mismatched"):
        return "mismatched"
    if counts.get("errored"):
        return "errored"
    if counts.get("passed"):
        return "passed"
    return "skipped"

def _bad_inputs(op, device, limit):
    import re
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
        except case.error_type as error:
            counts["passed"] += 1
        except Exception as error:
            counts["errored"] += 1
            detail = detail or (f"raised {type(error).__name__} ({_first_line(error)[:120]}), "
                                f"expected {case.error_type.__name__}")
        else:
            counts["mismatched"] += 1
            detail = detail or f"no error where the CPU raises {case.error_type.__name__}: {case.error_regex[:100]}"
    if not detail and counts["skipped"] and not counts["passed"]:
        detail = "the CPU raises the declared error for none of its error inputs (device-specific cases)"
    return _op_status(counts), counts, detail

def _find_the_test_function_from_frames():
    """torch's `extract_test_fn` (the running unittest's test function, None outside a test) searches the stack
    with `inspect.stack()`, which reads the source lines of every frame; OpInfo calls it for every sample input,
    and the sweeps spent most of their time there. The same search, over the frames alone."""
    import unittest
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    def extract_test_fn():
        try:
            frame = sys._getframe()
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

    for module in (common_utils, core):
        if hasattr(module, "extract_test_fn"):
            module.extract_test_fn = extract_test_fn

def _main(config):
    try:
        torch = _setup(config)
        from torch.testing._internal.common_methods_invocations import op_db
        _find_the_test_function_from_frames()
    except BaseException as error:
        _emit("fatal", detail=_describe(error))
        return
    by_name = {_full_name(op): op for op in op_db}
    checks = {"differential": _differential, "bad inputs": _bad_inputs}
    for kind, name in config["work"]:
        _emit("start", sweep=kind, op=name)
        started = time.perf_counter()
        op = by_name.get(name)
        if op is None:
            _emit("op", sweep=kind, op=name, status="skipped", counts={}, detail="not in this torch's op_db",
                  seconds=0.0)
            continue
        torch.manual_seed(0)
        try:
            status, counts, detail = checks[kind](op, config["device"], config["limit"])
        except BaseException as error:
            status, counts, detail = "errored", {"errored": 1}, f"the sweep itself failed: {_describe(error)}"
        _emit("op", sweep=kind, op=name, status=status, counts=counts, detail=detail,
              seconds=round(time.perf_counter() - started, 3))
'''


@dataclass
class _Run:
    """What one child process did."""

    returncode: int | None
    timed_out: bool
    messages: list[dict]
    log: str
    seconds: float


def _child_environment(env: dict[str, str] | None) -> dict[str, str]:
    environment = dict(os.environ)
    environment.update(env or {})
    environment.setdefault("PYTHONFAULTHANDLER", "1")
    environment["PU1_SCORECARD_UNDEFINED"] = json.dumps(_UNDEFINED_OUTPUT)
    return environment


class _Cancelled(Exception):
    """The scorecard was interrupted: no new process starts, running ones are killed."""


# What the templates import besides torch, so that each child does not: the first torch.testing.assert_close
# imports torch.distributed.tensor (0.6 s). Not the OpInfo database: it must see the functions as the
# backend's imports leave them (a backend may replace some).
_PRELOAD = ("torch.distributed.tensor",)


def _run_program(argv: Sequence[str], env: dict[str, str], timeout: float, renew_on: str | None = None,
                 stop: threading.Event | None = None) -> _Run:
    """Run `python *argv` in a fresh process group (forked from the template of `env`); kill the group when it
    outlives `timeout` (renewed on `renew_on`) or when `stop` is set (then raise _Cancelled)."""
    if stop is not None and stop.is_set():
        raise _Cancelled()
    started = time.perf_counter()
    messages: list[dict] = []
    with tempfile.TemporaryFile("w+b") as errors:
        output, child_output = os.pipe()
        try:
            process = fork_server(env, _PRELOAD).start(argv, child_output, errors.fileno())
        finally:
            os.close(child_output)
        stdout = os.fdopen(output, "rb", buffering=0)
        deadline = time.monotonic() + timeout
        buffer = b""
        timed_out = False
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while True:
                if stop is not None and stop.is_set():
                    process.kill_group()
                    raise _Cancelled()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if not selector.select(timeout=min(remaining, 0.5)):
                    continue
                chunk = os.read(output, 65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    text = line.decode("utf-8", "replace")
                    if text.startswith(_MARK):
                        message = json.loads(text[len(_MARK):])
                        messages.append(message)
                        if renew_on and message.get("kind") == renew_on:
                            deadline = time.monotonic() + timeout
        if timed_out:
            process.kill_group()
        try:
            returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill_group()
            returncode = process.wait()
        stdout.close()
        errors.seek(0)
        log = errors.read()[-4000:].decode("utf-8", "replace")
    return _Run(returncode, timed_out, messages, log, time.perf_counter() - started)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_CHILD_FILES: dict[str, str] = {}


def _child_file(main: str) -> str:
    """The child program as a real file (inspect.stack() is slow for `-c` code: the sweeps replace the OpInfo helper
    of torch 2.13 that calls it, a torch whose helper they do not know still calls it), named after its content
    in the user's cache folder: it is never removed, so a process killed before its exit handlers run (a Jupyter
    kernel ended with a signal) leaves no folder behind."""
    import hashlib

    source = _HARNESS + main + '\nif __name__ == "__main__":\n    _main(json.loads(sys.argv[1]))\n'
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    known = _CHILD_FILES.get(key)
    if known is None or not os.path.exists(known):
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pu1-explorer"
        path = folder / f"scorecard_child_{key}.py"
        if not path.is_file() or path.read_text() != source:
            folder.mkdir(parents=True, exist_ok=True)
            written = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
            written.write_text(source)
            os.replace(written, path)  # whole, even with another process writing the same file
        _CHILD_FILES[key] = str(path)
    return _CHILD_FILES[key]


def _config_program(main: str, config: dict) -> list[str]:
    """The command line that runs the child file as a script with `config`: no frame of `-c` code is on the
    stack, whose lookups would make every inspect.stack() scan all modules (see `_child_file`)."""
    return [_child_file(main), json.dumps(config)]


def _run_probe(probe: Probe, device: str, imports: Sequence[str], env: dict[str, str], timeout: float,
               stop: threading.Event | None = None) -> ProbeResult:
    """One probe in a fresh process, its ending turned into a ProbeResult."""
    config = {"code": probe.code, "device": device, "imports": list(imports), "uses_imports": probe.uses_imports}
    run = _run_program(_config_program(_PROBE_MAIN, config), env, timeout, stop=stop)
    result = next((m for m in run.messages if m.get("kind") == "result"), None)
    log = run.log.strip()
    if run.timed_out:
        status, detail = "timed out", f"killed after {timeout:g} s"
    elif run.returncode is not None and run.returncode < 0:
        status, detail = "crashed", f"the process died of {_signal_name(run.returncode)}"
    elif result is None:
        status, detail = "crashed", f"the process exited with code {run.returncode} before reporting"
    else:
        status, detail = result["status"], result.get("detail", "")
    if run.timed_out and result is not None:
        status, detail = result["status"], result.get("detail", "")
    counts = result.get("counts", {}) if result else {}
    keep_log = log if status != "passed" else ""
    return ProbeResult(probe.name, probe.capability, status, round(run.seconds, 3), detail, counts, [], keep_log)


def _sweep_chunk(work: Sequence[tuple[str, str]], device: str, imports: Sequence[str], env: dict[str, str],
                 timeout: float, limit: int, stop: threading.Event | None = None
                 ) -> tuple[dict[tuple[str, str], OpResult], dict[str, str]]:
    """Sweep (sweep kind, op) pairs in as many processes as crashes make necessary; a crash costs the pair it hit."""
    results: dict[tuple[str, str], OpResult] = {}
    logs: dict[str, str] = {}
    remaining = [tuple(item) for item in work]
    while remaining:
        config = {"work": remaining, "device": device, "imports": list(imports), "limit": limit}
        run = _run_program(_config_program(_SWEEP_MAIN, config), env, timeout, renew_on="start", stop=stop)
        current = None
        for message in run.messages:
            if message["kind"] == "start":
                current = (message["sweep"], message["op"])
            elif message["kind"] == "op":
                results[(message["sweep"], message["op"])] = OpResult(
                    message["op"], message["status"], message.get("counts", {}), message.get("detail", ""),
                    message.get("seconds", 0.0))
                current = None
            elif message["kind"] == "fatal":
                for item in remaining:
                    results.setdefault(item, OpResult(item[1], "errored", {}, message["detail"]))
        if run.timed_out:
            ending, reason = "timed out", f"killed after {timeout:g} s"
        elif run.returncode is not None and run.returncode < 0:
            ending, reason = "crashed", f"the process died of {_signal_name(run.returncode)}"
        else:
            ending, reason = "crashed", f"the process exited with code {run.returncode}"
        if current is not None:
            results[current] = OpResult(current[1], ending, {}, reason, round(run.seconds, 3))
            logs[current[0]] = logs.get(current[0], "") + f"--- {current[1]}: {reason}\n{run.log.strip()[-1500:]}\n"
        elif any(item not in results for item in remaining):
            for item in remaining:  # died before the first op: every op of the chunk goes with it
                results.setdefault(item, OpResult(item[1], ending, {}, f"{reason} before the sweep started"))
                logs[item[0]] = f"--- {reason} before the sweep started\n{run.log.strip()[-1500:]}\n"
        remaining = [item for item in remaining if item not in results]
    return results, logs


def _sweep_result(name: str, kind: str, ops: list[OpResult], seconds: float, log: str) -> ProbeResult:
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
    counts["ops"] = len(ops)
    counts["samples passed"] = samples
    return ProbeResult(name, _GUIDE["operators"], status, round(seconds, 3), detail, counts, ops, log[-6000:])


def sweep_ops(kind: str, mode: str) -> list[str]:
    """The operators a sweep covers: `QUICK_OPS` / `QUICK_ERROR_OPS`, or all of op_db (bad inputs: those with some)."""
    if mode == "quick":
        return list(QUICK_OPS if kind == "differential" else QUICK_ERROR_OPS)
    from torch.testing._internal.common_methods_invocations import op_db

    return [op.name + ("." + op.variant_test_name if op.variant_test_name else "") for op in op_db
            if kind == "differential" or op.error_inputs_func is not None]


class UnknownDeviceError(ValueError):
    """The device is not the PrivateUse1 backend registered after the imports."""


def preflight(device: str, imports: Sequence[str] = (), env: dict[str, str] | None = None,
              timeout: float = 60.0) -> dict:
    """Check that `device` is the PrivateUse1 backend (after `imports`) and return its torch version: in this
    process when it already has torch, those modules and no extra `env`, else in a fresh one."""
    torch = sys.modules.get("torch")
    if torch is not None and not env and all(spec in sys.modules for spec in imports):
        name = torch._C._get_privateuse1_backend_name()
        if name == device:
            return {"name": name, "version": torch.__version__, "module": hasattr(torch, device)}
    code = ("import json\ntorch = _setup(CONFIG)\n"
            "_emit('preflight', name=torch._C._get_privateuse1_backend_name(), version=torch.__version__,"
            " module=hasattr(torch, CONFIG['device']))\n")
    program = _HARNESS + f"\nCONFIG = json.loads({json.dumps({'device': device, 'imports': list(imports)})!r})\n" + \
        "try:\n" + textwrap.indent(code, "    ") + \
        "except BaseException as error:\n    _emit('fatal', detail=_describe(error))\n"
    run = _run_program(["-c", program], _child_environment(env), timeout)
    found = next((m for m in run.messages if m["kind"] in ("preflight", "fatal")), None)
    if found is None:
        ending = "timed out" if run.timed_out else f"ended with code {run.returncode}"
        raise RuntimeError(f"checking device {device!r}: the process {ending}: {run.log.strip()[-200:]}")
    if found["kind"] == "fatal":
        raise UnknownDeviceError(f"checking device {device!r}: {found['detail']}")
    if found["name"] != device:
        after = f" after importing {', '.join(imports)}" if imports else ""
        hint = "" if imports else " (a backend that does not autoload must be imported: imports=[...], --import)"
        raise UnknownDeviceError(f"unknown device {device!r}: the PrivateUse1 backend{after} is "
                                 f"{found['name']!r}{hint}")
    return found


def scorecard(device: str, imports: Sequence[str] = (), timeout: float = 60.0, jobs: int = 2, opinfo: str = "quick",
              progress: Callable[[str], None] | None = None, *, env: dict[str, str] | None = None,
              probes: Sequence[str] | None = None, extra_probes: Sequence[Probe] = (),
              ops: Sequence[str] | None = None) -> Scorecard:
    """Run every probe (or those named in `probes`) against PrivateUse1 device `device`, `jobs` processes at a time.

    `imports`: modules or .py files each process imports after torch; `env`: extra environment
    variables for the processes; `extra_probes`: more `Probe`s (run whatever `probes` says); `ops`: the op_db
    names the sweeps cover instead of the `opinfo` mode's.
    Raises ValueError (before any probe runs) for an unknown probe name, OpInfo mode or device.
    """
    if opinfo not in OPINFO_MODES:
        raise ValueError(f"opinfo must be one of {', '.join(OPINFO_MODES)}, not {opinfo!r}")
    if jobs < 1 or timeout <= 0:
        raise ValueError("jobs must be at least 1 and timeout positive")
    device = str(device).split(":")[0]
    available = {p.name: p for p in PROBES}
    available.update({p.name: p for p in extra_probes})
    sweeps = {"opinfo differential": "differential", "opinfo bad inputs": "bad inputs"}
    if probes is not None:
        unknown = [name for name in probes if name not in available and name not in sweeps]
        if unknown:
            names = ", ".join(list(available) + list(sweeps))
            raise ValueError(f"unknown probe {unknown[0]!r}; the probes are: {names}")
        chosen = [name for name in list(available) + list(sweeps) if name in probes]
    else:
        chosen = list(available) + (list(sweeps) if opinfo != "none" else [])
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    environment = _child_environment(env)
    found = preflight(device, imports, env, timeout)
    limit = QUICK_SAMPLES if opinfo == "quick" else 0
    mode = "quick" if opinfo == "none" else opinfo  # an explicitly named sweep with opinfo="none" runs quick

    stop = threading.Event()  # set when the caller is interrupted: the workers kill their processes
    wanted_sweeps = [name for name in chosen if name in sweeps]
    work = []
    swept_ops = {name: list(ops) if ops is not None else sweep_ops(sweeps[name], mode) for name in wanted_sweeps}
    for op in dict.fromkeys(op for name in wanted_sweeps for op in swept_ops[name]):
        work += [(sweeps[name], op) for name in wanted_sweeps if op in swept_ops[name]]
    parts = -(-len(work) // SWEEP_CHUNK)
    chunks = [work[i * len(work) // parts:(i + 1) * len(work) // parts] for i in range(parts)]
    tasks: list[tuple[str, Callable[[], object]]] = [
        ("sweep", lambda chunk=chunk: _sweep_chunk(chunk, device, imports, environment, timeout, limit, stop))
        for chunk in chunks if chunk]
    for name in chosen:
        if name not in sweeps:
            tasks.append((name, lambda probe=available[name]: _run_probe(probe, device, imports, environment,
                                                                         timeout, stop)))
    # the longest tasks first: sweeps and compiling
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i][0] != "sweep", tasks[i][0] != "torch.compile"))
    swept: dict[tuple[str, str], OpResult] = {}
    logs: dict[str, str] = {}
    sweeps_left = sum(name == "sweep" for name, _ in tasks)
    results: dict[str, ProbeResult] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(tasks[i][1]): i for i in order}
        for future in concurrent.futures.as_completed(futures):
            name = tasks[futures[future]][0]
            if name != "sweep":
                results[name] = future.result()
                _report_progress(progress, results[name], len(results), len(chosen))
                continue
            chunk_results, chunk_logs = future.result()
            swept.update(chunk_results)
            for kind, text in chunk_logs.items():
                logs[kind] = logs.get(kind, "") + text
            sweeps_left -= 1
            if sweeps_left:
                continue
            for sweep in wanted_sweeps:
                kind = sweeps[sweep]
                op_results = [swept[(kind, op)] for op in swept_ops[sweep]]
                results[sweep] = _sweep_result(sweep, kind, op_results, sum(op.seconds for op in op_results),
                                               logs.get(kind, ""))
                _report_progress(progress, results[sweep], len(results), len(chosen))
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for sweep in wanted_sweeps:  # a sweep with no operators at all
        if sweep not in results:
            results[sweep] = _sweep_result(sweep, sweeps[sweep], [], 0.0, "")
    return Scorecard(device=device, torch_version=found["version"], started=started_at,
                     seconds=round(time.perf_counter() - started, 3), probes=[results[name] for name in chosen],
                     imports=list(imports), opinfo=opinfo)


def _report_progress(progress: Callable[[str], None] | None, result: ProbeResult, done: int, total: int) -> None:
    if progress is not None:
        progress(f"[{done}/{total}] {result.name}: {result.status} ({result.seconds:.1f} s) {result.detail}")
