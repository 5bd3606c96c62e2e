"""The explorer on "toy", a second C++ PrivateUse1 backend (examples/toy) that is not sim.

Each test runs a fresh process that imports torch_toy explicitly (sim's autoload is off there).
The first tests check the fixture itself; the rest run every explorer function, command and widget on it.
"""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_explorer, run_forked, run_python
from tests.toy_backend import TOY_SOURCE, ToyBuildError, build_toy_backend, toy_library

PRELUDE = "import json, os, torch, torch_toy\nassert not hasattr(torch, 'sim')\n"


def run_toy(code: str, env: dict[str, str], timeout: float = 300, helpers: str = "") -> dict:
    """Run `helpers` then `code` after importing torch_toy in a fresh process (forked from a template that has
    imported torch); returns the JSON it printed last."""
    result = run_forked(["-c", PRELUDE + textwrap.dedent(helpers) + textwrap.dedent(code)], timeout=timeout, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_cli(arguments: list[str], env: dict[str, str], cwd: Path, timeout: float = 600):
    """Run `python -m pu1_explorer ARGUMENTS` in a fresh process under the toy environment."""
    return run_explorer(*arguments, timeout=timeout, cwd=cwd, **{"SIM_FALLBACK": "silent", **env})


# ----------------------------------------------------------------- the fixture itself


def test_build_is_reused_and_torch_toy_does_not_autoload(fixture_backend_env):
    """A second build call keeps the installed library (the same file, untouched); `import torch` alone leaves
    PrivateUse1 unnamed."""
    target = Path(fixture_backend_env["PYTHONPATH"])
    library = toy_library(target)
    before = library.stat()
    assert build_toy_backend(target) == fixture_backend_env
    after = toy_library(target).stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    result = run_python("import torch; print(torch.device('privateuseone').type, hasattr(torch, 'toy'))",
                        **fixture_backend_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["privateuseone", "False"]


def test_a_compile_error_is_one_clear_line(tmp_path):
    """A broken copy of toy fails the build with the compiler's first error, not a wall of output."""
    source = tmp_path / "toy"
    shutil.copytree(TOY_SOURCE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (source / "csrc" / "toy.cpp").write_text("int main() { return undeclared_name; }\n")
    with pytest.raises(ToyBuildError) as raised:
        build_toy_backend(tmp_path / "out", source)
    message = str(raised.value)
    assert "\n" not in message
    assert "toy.cpp" in message and "undeclared_name" in message


def test_tensors_views_resize_set_and_scalars(fixture_backend_env):
    """The minimal operators: allocation, copies both ways, views, resize_, set_, item, printing."""
    out = run_toy("""
        x = torch.arange(6.0).to("toy")
        view = x.view(2, 3)
        transposed = view.t()
        grown = torch.empty(0, device="toy")
        grown.resize_(4)
        grown.fill_(2.5)
        shared = torch.empty(0, device="toy").set_(grown)
        offset = torch.empty(0, device="toy").set_(grown.untyped_storage(), 1, (2,), (1,))
        print(json.dumps({
            "device": str(x.device), "ones": torch.ones(2, device="toy").cpu().tolist(),
            "view": view.cpu().tolist(), "shares": view.data_ptr() == x.data_ptr(),
            "transposed": transposed.contiguous().cpu().tolist(), "t_stride": list(transposed.stride()),
            "grown": grown.cpu().tolist(), "nbytes": grown.untyped_storage().nbytes(),
            "shared": shared.data_ptr() == grown.data_ptr(), "offset": offset.cpu().tolist(),
            "item": x[4].item(), "repr": repr(torch.ones(1, device="toy")),
            "dtype": torch.zeros(2, dtype=torch.int64, device="toy").dtype == torch.int64,
        }))
    """, fixture_backend_env)
    assert out["device"] == "toy:0"
    assert out["ones"] == [1.0, 1.0]
    assert out["view"] == [[0, 1, 2], [3, 4, 5]] and out["shares"]
    assert out["transposed"] == [[0, 3], [1, 4], [2, 5]] and out["t_stride"] == [1, 3]
    assert out["grown"] == [2.5] * 4 and out["nbytes"] == 16
    assert out["shared"] and out["offset"] == [2.5, 2.5]
    assert out["item"] == 4.0
    assert out["repr"] == "tensor([1.], device='toy:0')"
    assert out["dtype"]


def test_add_and_mul_kernels_match_the_cpu(fixture_backend_env):
    """add.Tensor and mul.Tensor computed by toy's own loops: broadcasting, alpha, scalars, promotion."""
    out = run_toy("""
        torch.manual_seed(0)
        a, b = torch.randn(4, 3), torch.randn(3)
        i, j = torch.randint(-9, 9, (2, 3)), torch.randint(-9, 9, (2, 1))
        ta, tb, ti, tj = a.to("toy"), b.to("toy"), i.to("toy"), j.to("toy")
        checks = {
            "add": torch.equal((ta + tb).cpu(), a + b), "mul": torch.equal((ta * tb).cpu(), a * b),
            "alpha": torch.allclose(torch.add(ta, tb, alpha=-2.5).cpu(), torch.add(a, b, alpha=-2.5)),
            "scalar": torch.equal((ta * 3).cpu(), a * 3) and torch.equal((ta + 1).cpu(), a + 1),
            "int": torch.equal((ti * tj + ti).cpu(), i * j + i),
            "promote": torch.equal((ti + ta[:2]).cpu(), i + a[:2]) and (ti + ta[:2]).dtype == torch.float32,
            "noncontiguous": torch.equal((ta.t() * ta.t()).cpu(), a.t() * a.t()),
            "half": torch.equal((ta.half() + tb.half()).cpu(), a.half() + b.half()),
        }
        kernels = {op: torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")
                   for op in ("aten::add.Tensor", "aten::mul.Tensor")}
        print(json.dumps({"checks": checks, "kernels": kernels}))
    """, fixture_backend_env)
    assert out["checks"] == {name: True for name in out["checks"]}
    assert out["kernels"] == {"aten::add.Tensor": True, "aten::mul.Tensor": True}


PROFILED = """
    from torch.profiler import ProfilerActivity, profile

    def called(function):
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            function()
        return sorted({event.name for event in profiled.events()})
"""


def test_sub_is_a_kernel_that_copies_through_the_cpu_fallback(fixture_backend_env):
    """sub.Tensor has a kernel of toy's own, which forwards to at::native::cpu_fallback (copies via aten::_to_cpu)."""
    out = run_toy("""
        a, b = torch.randn(5, 2), torch.randn(2)
        ta, tb = a.to("toy"), b.to("toy")
        dump = torch._C._dispatch_dump_table("aten::sub.Tensor")
        line = next(line for line in dump.splitlines() if line.startswith("PrivateUse1:"))
        print(json.dumps({
            "right": torch.equal((ta - tb).cpu(), a - b) and torch.equal((ta - 1).cpu(), a - 1),
            "device": str((ta - tb).device), "line": line,
            "sub_ops": called(lambda: ta - tb), "add_ops": called(lambda: ta + tb),
        }))
    """, fixture_backend_env, helpers=PROFILED)
    assert out["right"] and out["device"] == "toy:0"
    assert out["line"].endswith("[kernel]") and "toy.cpp" in out["line"]
    assert "aten::_to_cpu" in out["sub_ops"] and "aten::sub" in out["sub_ops"]
    assert "aten::_to_cpu" not in out["add_ops"]


def test_unsupported_operators_run_through_the_boxed_fallback(fixture_backend_env):
    """Operators without a toy kernel reach the boxed fallback, compute on the CPU and come back on toy."""
    out = run_toy("""
        x = torch.randn(3, 4)
        tx = x.to("toy")
        dump = torch._C._dispatch_dump_table("aten::flip")
        line = next(line for line in dump.splitlines() if line.startswith("PrivateUse1:"))
        flipped = torch.flip(tx, [0, 1])
        print(json.dumps({
            "flip": torch.equal(flipped.cpu(), torch.flip(x, [0, 1])), "device": str(flipped.device),
            "cumsum": torch.allclose(tx.cumsum(1).cpu(), x.cumsum(1)),
            "sum": abs(tx.sum().item() - x.sum().item()) < 1e-4,
            "line": line, "flip_ops": called(lambda: torch.flip(tx, [0])),
            "inplace": torch.equal(tx.clone().abs_().cpu(), x.abs()),
        }))
    """, fixture_backend_env, helpers=PROFILED)
    assert out["flip"] and out["device"] == "toy:0" and out["cumsum"] and out["sum"] and out["inplace"]
    assert out["line"].endswith("[backend fallback]") and "toy.cpp" in out["line"]
    assert "aten::_to_cpu" in out["flip_ops"]


def test_two_devices_and_a_thread_local_guard(fixture_backend_env):
    """toy:1 is a real second device; the current device is per thread; toy:2 does not exist."""
    out = run_toy("""
        import threading
        on_one = torch.ones(3, device="toy:1")
        errors = []
        for bad in (lambda: torch.empty(1, device="toy:2"), lambda: torch.toy.set_device(2),
                    lambda: on_one + torch.ones(3, device="toy:0"), lambda: torch.ones(3, device="toy:0") * on_one):
            try:
                bad()
            except (RuntimeError, ValueError) as error:
                errors.append(str(error))
        before = torch.toy.current_device()
        torch.toy.set_device(1)
        seen_by_thread = []
        thread = threading.Thread(target=lambda: seen_by_thread.append(torch.toy.current_device()))
        thread.start(); thread.join()
        print(json.dumps({
            "count": torch.toy.device_count(), "accel_count": torch.accelerator.device_count(),
            "accelerator": str(torch.accelerator.current_accelerator()), "available": torch.toy.is_available(),
            "on_one": str(on_one.device), "sum_on_one": str((on_one + on_one).device),
            "fallback_on_one": str(torch.flip(on_one, [0]).device),
            "moved": str(torch.ones(2, device="toy:0").to("toy:1").device),
            "before": before, "after": torch.toy.current_device(),
            "accel_index": torch.accelerator.current_device_index(),
            "default_now": str(torch.empty(1, device="toy").device), "thread": seen_by_thread,
            "errors": errors,
        }))
    """, fixture_backend_env)
    assert out["count"] == out["accel_count"] == 2 and out["available"] and out["accelerator"] == "toy"
    assert out["on_one"] == out["sum_on_one"] == out["fallback_on_one"] == out["moved"] == "toy:1"
    assert (out["before"], out["after"], out["accel_index"]) == (0, 1, 1)
    assert out["default_now"] == "toy:1"
    assert out["thread"] == [0]
    assert len(out["errors"]) == 4 and all("out of range" in error for error in out["errors"][:2])
    assert all("expects all tensors on toy:" in error for error in out["errors"][2:])


def test_conv2d_errors_and_memory_statistics_are_absent(fixture_backend_env):
    """No convolution_overrideable kernel (conv2d fails); a plain allocator (torch.accelerator.memory_stats raises)."""
    out = run_toy("""
        errors = {}
        for name, call in {
            "conv2d": lambda: torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device="toy"),
                                                         torch.ones(1, 1, 2, 2, device="toy")),
            "memory_stats": lambda: torch.accelerator.memory_stats(0),
        }.items():
            try:
                call()
                errors[name] = None
            except Exception as error:
                errors[name] = f"{type(error).__name__}: {error}"
        print(json.dumps({"errors": errors, "counters": hasattr(torch.toy, "memory_allocated")}))
    """, fixture_backend_env)
    assert out["errors"]["conv2d"].startswith("NotImplementedError: convolution_overrideable not implemented")
    assert "not a DeviceAllocator" in out["errors"]["memory_stats"]
    assert out["counters"] is False


# ------------------------------------------------------------------------ the engine


def test_dispatch_table_on_toy(fixture_backend_env):
    """dispatch_table names toy's own kernels, its per-operator copying kernel and its fallback."""
    out = run_toy("""
        import pu1_explorer
        rows = {op: pu1_explorer.dispatch_table(op, ["toy"])[0] for op in ("add.Tensor", "sub.Tensor", "flip")}
        print(json.dumps({op: [entry.key, entry.kind, entry.is_python, entry.provenance]
                          for op, entry in rows.items()}))
    """, fixture_backend_env)
    for operator in ("add.Tensor", "sub.Tensor"):
        key, kind, is_python, provenance = out[operator]
        assert (key, kind, is_python) == ("PrivateUse1", "kernel", False) and "toy.cpp" in provenance
    assert out["flip"][:2] == ["PrivateUse1", "fallback"] and "toy.cpp" in out["flip"][3]


def test_coverage_of_toy(fixture_backend_env):
    """coverage('toy'): add/mul/sub are kernels, operators without a kernel fall back, conv cannot run."""
    out = run_toy("""
        import pu1_explorer
        snapshot = pu1_explorer.coverage("toy")
        rows = snapshot.by_operator()
        names = ("aten::add.Tensor", "aten::mul.Tensor", "aten::sub.Tensor", "aten::flip", "aten::cumsum.out",
                 "aten::convolution_overrideable")
        print(json.dumps({"label": snapshot.label, "key": snapshot.backend_key,
                          "rows": {name: [rows[name].backend, rows[name].transitive] for name in names}}))
    """, fixture_backend_env)
    assert out["label"] == "toy" and out["key"] == "PrivateUse1"
    rows = out["rows"]
    assert rows["aten::add.Tensor"][0] == rows["aten::mul.Tensor"][0] == rows["aten::sub.Tensor"][0] == "kernel"
    assert rows["aten::flip"][0] == rows["aten::cumsum.out"][0] == "fallback"
    assert rows["aten::convolution_overrideable"][0] not in ("kernel", "fallback")


TRACE_HOPS = """
    import pu1_explorer

    def hops_of(function):
        try:
            with pu1_explorer.trace("toy") as recorded:
                function()
        except Exception as error:
            return {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
        return [[hop.index, hop.operator, hop.key, hop.kind, hop.parent] for hop in recorded.hops if not hop.skipped]

    a, b = torch.randn(4).to("toy"), torch.randn(4).to("toy")
"""


def _subtree(hops: list[list], root: int) -> list[list]:
    """The hops below the hop numbered `root`, in order."""
    inside, result = {root}, []
    for hop in hops:
        if hop[4] in inside:
            inside.add(hop[0])
            result.append(hop)
    return result


def test_trace_shows_the_copying_fallback(fixture_backend_env):
    """trace('toy'): flip's PrivateUse1 hop is the fallback, which copies (aten::_to_cpu) and runs flip on the CPU;
    sub's own kernel does the same below its PrivateUse1 hop (with a wrapped scalar too); add stays on toy."""
    out = run_toy("""
        print(json.dumps({"sub": hops_of(lambda: a - b), "flip": hops_of(lambda: torch.flip(a, [0])),
                          "add": hops_of(lambda: a + b), "sub_scalar": hops_of(lambda: a - 1)}))
    """, fixture_backend_env, helpers=TRACE_HOPS)
    assert [name for name, hops in out.items() if isinstance(hops, dict)] == [], out
    for name, operator in (("flip", "aten::flip"), ("sub", "aten::sub.Tensor"), ("sub_scalar", "aten::sub.Tensor")):
        hops = out[name]
        top = next(hop for hop in hops if hop[1] == operator and hop[2] == "PrivateUse1")
        assert top[3] == ("fallback" if operator == "aten::flip" else "kernel"), top
        below = [(hop[1], hop[2]) for hop in _subtree(hops, top[0])]
        assert any(operator == "aten::_to_cpu" for operator, _ in below), below
        copied = [index for index, (op, _) in enumerate(below) if op == "aten::_to_cpu"]
        on_cpu = below.index((operator, "CPU"))
        assert copied[0] < on_cpu, below
    assert not any(hop[1] == "aten::_to_cpu" for hop in out["add"])
    assert any(hop[1:4] == ["aten::add.Tensor", "PrivateUse1", "kernel"] for hop in out["add"])


def test_monitor_fallbacks_counts_and_copies(fixture_backend_env):
    """monitor_fallbacks('toy') counts each fallback call and how many copied to the CPU, and sub's copying kernel
    (also with a wrapped scalar, which cpu_fallback hands to aten::_to_cpu in its tensor list); add is not counted."""
    out = run_toy("""
        from pu1_explorer.fallback_report import monitor_fallbacks
        a, b = torch.randn(4).to("toy"), torch.randn(4).to("toy")
        with monitor_fallbacks("toy") as report:
            torch.flip(a, [0]); torch.flip(b, [0]); a - b; a - 1; a + b
        flip = report.calls.get("aten::flip")
        print(json.dumps({"backend": report.backend, "key": report.backend_key, "total": report.total,
                          "operators": sorted(report.calls), "flip": [flip.count, flip.copied] if flip else None,
                          "copying_kernels": dict(report.copying_kernels),
                          "markdown": report.to_markdown()}))
    """, fixture_backend_env)
    assert out["backend"] == "toy" and out["key"] == "PrivateUse1"
    assert out["flip"] == [2, 2]
    assert out["total"] == 2 and out["operators"] == ["aten::flip"]
    assert out["copying_kernels"] == {"aten::sub.Tensor": 2}
    assert "Fallback report for toy" in out["markdown"] and "`aten::flip` | 2 | 2" in out["markdown"]


def test_memory_sampling_degrades_without_allocator_statistics(fixture_backend_env):
    """sample_memory on toy (a plain allocator) returns nothing and says why instead of raising."""
    out = run_toy("""
        from pu1_explorer import memory
        print(json.dumps({"samples": memory.sample_memory(0), "why": memory.statistics_unavailable(),
                          "capacities": memory.capacities()}))
    """, fixture_backend_env)
    assert out["samples"] == [] and out["capacities"] == {}
    assert out["why"].startswith("toy keeps no allocator statistics") and "DeviceAllocator" in out["why"]


def test_key_set_and_profiler_timeline_on_toy(fixture_backend_env):
    """key_set of a toy tensor names toy and starts its backend keys at PrivateUse1; timeline() reads a toy run."""
    out = run_toy("""
        import pu1_explorer
        from torch.profiler import ProfilerActivity, profile
        x = torch.ones(2, device="toy")
        picture = pu1_explorer.key_set(x)
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            torch.flip(x + x, [0])
        spans = pu1_explorer.timeline(profiled)
        print(json.dumps({"device_name": picture.device_name, "keys": picture.keys, "first": picture.first_key,
                          "spans": [[span.track, span.name, span.depth] for span in spans]}))
    """, fixture_backend_env)
    assert out["device_name"] == "toy"
    assert "PrivateUse1" in out["keys"] and "AutogradPrivateUse1" in out["keys"]
    assert out["keys"].index("AutogradPrivateUse1") < out["keys"].index("PrivateUse1")
    top_level = [name for track, name, depth in out["spans"] if track == "host" and depth == 0]
    assert top_level == ["aten::add", "aten::flip"]
    assert any(name == "aten::_to_cpu" and depth > 0 for _, name, depth in out["spans"])


def test_the_rest_of_the_engine_on_toy(fixture_backend_env):
    """computed_table, fallback_operators, observe, diff, run_traced and the trace exports, all on toy."""
    out = run_toy("""
        import pu1_explorer
        from pu1_explorer.op_coverage import observe
        from pu1_explorer.fallback_report import fallback_operators, monitor_fallbacks
        from pu1_explorer.tracer import run_traced
        table = pu1_explorer.computed_table("aten::mul.Tensor")
        watched = fallback_operators("PrivateUse1")
        snapshot = pu1_explorer.coverage("toy")
        x = torch.ones(3, device="toy")
        with monitor_fallbacks("toy") as report:
            x - x
        seen = observe(snapshot, report).by_operator()
        changes = {change.operator: [change.before, change.after]
                   for change in pu1_explorer.diff(pu1_explorer.coverage("CPU", label="cpu"), snapshot)}
        traced = run_traced("y = torch.flip(torch.ones(2, device=device), [0])", device="toy")
        failed = run_traced("torch.nn.functional.conv2d(torch.ones(1, 1, 3, 3, device=device), "
                            "torch.ones(1, 1, 2, 2, device=device))", device="toy")
        exported = json.loads(traced.to_json())
        chrome = traced.to_chrome_trace()
        print(json.dumps({
            "mul_kind": table["PrivateUse1"].kind, "watched_flip": "aten::flip" in watched,
            "watched_add": "aten::add.Tensor" in watched, "sub_observed": seen["aten::sub.Tensor"].transitive,
            "sub_falls_back": seen["aten::sub.Tensor"].falls_back, "flip_change": changes.get("aten::flip"),
            "traced_error": traced.error, "traced_device": exported["device"],
            "devices_in_json": sorted({t["device"] for hop in exported["hops"] for t in hop["inputs"]}),
            "chrome_keys": sorted({event["cat"] for event in chrome["traceEvents"]}),
            "failed_error": failed.error,
        }))
    """, fixture_backend_env)
    assert out["mul_kind"] == "kernel"
    assert out["watched_flip"] and not out["watched_add"]
    assert out["sub_observed"] == "copies_to_cpu" and out["sub_falls_back"]
    assert out["flip_change"] == ["kernel", "fallback"]
    assert out["traced_error"] is None and out["traced_device"] == "toy"
    assert "toy:0" in out["devices_in_json"] and "PrivateUse1" in out["chrome_keys"]
    assert out["failed_error"].startswith("NotImplementedError: convolution_overrideable")


def test_scorecard_on_toy(fixture_backend_env):
    """The conformance scorecard runs its probes against toy: what toy has passes, what it lacks does not."""
    out = run_toy("""
        from pu1_explorer.conformance import scorecard
        names = ["device module", "torch.accelerator", "devices and guard", "allocator statistics", "operators",
                 "generator"]
        environment = {name: os.environ[name] for name in ("PYTHONPATH", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
        card = scorecard("toy", imports=["torch_toy"], opinfo="none", env=environment, probes=names)
        print(json.dumps({probe.name: [probe.status, probe.detail] for probe in card.probes}))
    """, fixture_backend_env, timeout=600)
    statuses = {name: status for name, (status, _) in out.items()}
    for name in ("device module", "torch.accelerator", "devices and guard", "operators"):
        assert statuses[name] == "passed", out[name]
    for name in ("allocator statistics", "generator"):
        assert statuses[name] not in ("passed", "crashed", "timed out"), out[name]


# -------------------------------------------------------------------- the command line


def test_cli_coverage_on_toy(fixture_backend_env, tmp_path):
    """`coverage --device toy --import torch_toy` classifies toy's operators."""
    result = run_cli(["coverage", "--device", "toy", "--import", "torch_toy", "--format", "csv", "-o", "cov.csv"],
                     fixture_backend_env, tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split(",")[0]: line.split(",") for line in (tmp_path / "cov.csv").read_text().splitlines()[1:]}
    assert rows["aten::add.Tensor"][1] == "kernel" and rows["aten::sub.Tensor"][1] == "kernel"
    assert rows["aten::flip"][1] == "fallback"


def test_cli_trace_on_toy(fixture_backend_env, tmp_path):
    """`trace EXPR --device toy --import torch_toy` shows sub's kernel copying to the CPU."""
    result = run_cli(["trace", "torch.ones(3, device=device) - 1", "--device", "toy", "--import", "torch_toy",
                      "--hide-skipped"], fixture_backend_env, tmp_path)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "aten::sub.Tensor @ PrivateUse1 (kernel" in text
    assert "aten::_to_cpu" in text and "aten::sub.Tensor @ CPU (kernel" in text
    assert "@toy:0" in text and "sim" not in text


def test_cli_table_defaults_include_toy(fixture_backend_env, tmp_path):
    """`table add.Tensor --import torch_toy`: the default keys include toy's, with toy's kernel."""
    result = run_cli(["table", "add.Tensor", "--import", "torch_toy"], fixture_backend_env, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    backend = next(line for line in lines if line and line[0] == "PrivateUse1")
    assert backend[1] == "kernel" and "toy.cpp" in " ".join(backend[2:])
    assert ["AutogradPrivateUse1", "autograd"] in [line[:2] for line in lines]


def test_cli_import_takes_a_python_file(fixture_backend_env, tmp_path):
    """`--import file.py` runs the file, which may load the backend."""
    (tmp_path / "load_toy.py").write_text("import torch_toy\n")
    result = run_cli(["table", "mul.Tensor", "--keys", "PrivateUse1", "--import", str(tmp_path / "load_toy.py")],
                     fixture_backend_env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["PrivateUse1", "kernel"]


def test_cli_report_on_toy(fixture_backend_env, tmp_path):
    """`report --device toy --import torch_toy -o out.html` exits 0; the page names toy and its fallback calls."""
    result = run_cli(["report", "--device", "toy", "--import", "torch_toy", "--steps", "1", "-o", "out.html"],
                     fixture_backend_env, tmp_path, timeout=900)
    page = (tmp_path / "out.html").read_text()
    assert "toy" in page and "sim:0" not in page
    assert "aten::addmm.out" in page  # nn.Linear's matmul reaches toy's fallback in the mlp workload
    assert result.returncode == 0, result.stderr[-2000:]


# ---------------------------------------------------------------------------- widgets


def test_widgets_on_toy(fixture_backend_env):
    """Every explorer widget constructs on toy, defaults to toy, and renders toy (never sim)."""
    out = run_toy("""
        from pu1_explorer.widgets import CoverageExplorer, DispatchTable, DispatchVisualizer
        from pu1_explorer.widgets.keyset import KeySetView
        from pu1_explorer.widgets.monitors import FallbackMonitor, MemoryMonitor
        visualizer = DispatchVisualizer("x = torch.ones(3, device=device)\\ny = torch.flip(x - x, [0])",
                                        device="toy")
        table = DispatchTable()
        explorer = CoverageExplorer()
        memory = MemoryMonitor()
        x = torch.ones(4, device="toy")
        keys = KeySetView(x)
        samples = memory.run(lambda step: x + x, steps=2)
        fallbacks = FallbackMonitor()
        report = fallbacks.run(lambda step: torch.flip(x, [0]), steps=3)
        pages = {"visualizer": visualizer.static_html(), "table": table.static_html(),
                 "coverage": explorer.static_html(), "memory": memory.static_html(),
                 "fallbacks": fallbacks.static_html(), "keys": keys.static_html()}
        print(json.dumps({
            "devices": [t.device for t in visualizer.traces], "errors": [t.error for t in visualizer.traces],
            "fell_back": any(h.key == "PrivateUse1" and h.kind == "fallback" for h in visualizer.traces[0].hops),
            "table_backends": list(table.backends), "coverage_label": explorer.snapshot.label,
            "samples": samples, "memory_unavailable": memory.unavailable, "memory_progress": memory.progress.value,
            "fallback_counts": {e.operator: [e.count, e.copied] for e in report.ranked()},
            "toy_in": {name: "toy" in page for name, page in pages.items() if name != "fallbacks"},
            "sim_in": {name: "sim:" in page or "'sim'" in page for name, page in pages.items()},
        }))
    """, fixture_backend_env)
    assert out["devices"] == ["toy", "cpu"] and out["errors"] == [None, None]
    assert out["fell_back"]
    assert "toy" in out["table_backends"] or "PrivateUse1" in out["table_backends"]
    assert out["coverage_label"] == "toy"
    assert out["samples"] == [] and "DeviceAllocator" in out["memory_unavailable"] and out["memory_progress"] == 2
    assert out["fallback_counts"] == {"aten::flip": [3, 3]}
    assert out["toy_in"] == {name: True for name in ("visualizer", "table", "coverage", "memory", "keys")}
    assert not any(out["sim_in"].values()), out["sim_in"]
