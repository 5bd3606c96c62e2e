"""`pu1-explorer new`: sim's driver and integration under a new name, "mydev", built and graded by the scorecard.

The backend is the one `make setup` compiled while neither sim's sources nor the template have changed since, else
it is generated and compiled once per test run (`vendor_backend` fixture); it is graded in fresh processes where
`import torch` loads it through its entry point while sim's autoload is off; autoload itself is graded with sim's
autoload on too, where sim steps aside for the installed mydev.

The generated backend passes every probe, so its own tests/test_scorecard.py lists none as NOT_YET.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import torch

from pu1_explorer.new_backend import (TEMPLATE, NewBackendError, check_name, generated_path, new_backend, render,
                                      renamer, sim_sources)
from tests.conftest import run_explorer, run_forked
from tests.environments import pip
from tests.explorer.test_vendor_workflow import workflow_test_commands
from tests.vendor_backend import DEVICE, build_vendor_backend, vendor_environment, vendor_source

PASSING_PROBES = ("device module", "torch.accelerator", "devices and guard", "allocator statistics", "operators",
                  "streams and events", "stream-ordering traces", "generator", "pinned memory", "autograd on layers",
                  "autocast (AMP)", "serialization", "attention", "RNNs", "torch.compile", "profiler", "distributed",
                  "graph capture")


@pytest.fixture(scope="session")
def vendor_backend(tmp_path_factory) -> dict[str, str]:
    """The environment of a fresh interpreter that can import the generated mydev backend: built once per test run
    by whichever worker needs it first while the others wait (a cold compile takes about 9 minutes on 2 cores;
    through ccache, unchanged sources take seconds)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with FileLock(str(shared / "vendor-backend.lock")):
        return vendor_environment(build_vendor_backend(shared / "vendor-backend"))


def run_scorecard(env: dict[str, str], imports: list[str], opinfo: str = "none", probes: list[str] | None = None,
                  timeout: float = 900) -> dict:
    """The scorecard of mydev, run from a fresh process under `env`: {probe: [status, detail]}."""
    code = textwrap.dedent(f"""
        import json
        from pu1_explorer.conformance import scorecard
        card = scorecard({DEVICE!r}, imports={imports!r}, opinfo={opinfo!r}, probes={probes!r}, env={env!r})
        print(json.dumps({{probe.name: [probe.status, probe.detail] for probe in card.probes}}))
    """)
    result = run_forked(["-c", code], timeout=timeout, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ the generated tree


def test_the_generated_backend_is_sims_driver_and_integration_under_the_new_name():
    """Every file of sim's driver and package (but the demo) is in the generated project, renamed; the template's own
    files add the packaging, the README, the tests and the autoload entry point, which replaces sim's."""
    files = {path.as_posix(): text for path, text in render("otherdev").items()}
    package, driver = sim_sources()
    rename = renamer("otherdev")
    own = {path.relative_to(TEMPLATE).as_posix() for path in TEMPLATE.rglob("*.jinja")}
    copied = {}
    for folder, prefix in ((package, "backend/torch_sim"), (driver, "backend/simdriver")):
        for path in folder.rglob("*"):
            relative = path.relative_to(folder).as_posix()
            if path.suffix in (".py", ".cpp", ".h", ".json") and "__pycache__" not in relative \
                    and not relative.startswith("simdriver/") and path.name != "demo.py":
                copied[generated_path(f"{prefix}/{relative}", "otherdev")] = rename(path.read_text())
    assert len(copied) > 70 and set(copied) <= set(files)
    assert {"src/torch_otherdev/csrc/otherdev.h", "otherdevdriver/include/otherdevdriver.h",
            "src/torch_otherdev/csrc/guard.cpp", "src/torch_otherdev/steps.py"} <= set(copied)
    overridden = {path for path in copied if files[path] != copied[path]}
    assert overridden == {"src/torch_otherdev/autoload.py"} and "package/autoload.py.jinja" in own
    leftover = re.compile(r"(?<![A-Za-z0-9])(sim|Sim|SIM)(?![a-z])|simdriver|simccl")
    assert not {path: match.group(0) for path in set(copied) - overridden if (match := leftover.search(files[path]))}
    assert not any(re.search(r"\{\{ *(name|NAME) *\}\}|\{%", text) for text in files.values())  # all rendered
    assert {"setup.py", "pyproject.toml", "README.md", "tests/test_scorecard.py"} <= set(files)
    assert generated_path("backend/torch_sim/demo.py", "otherdev") is None and generated_path("README.md", "x") is None


def repeated_lines(text: str, sources: dict[str, str], window: int = 4) -> list[str]:
    """The runs of `window` consecutive code lines of `text` that also stand, in that order, in one of `sources`
    (blank lines, lone brackets and quotes ignored, whitespace stripped): code written twice."""
    def lines(code: str) -> list[str]:
        kept = (line.strip() for line in code.splitlines())
        return [line for line in kept if line and not re.fullmatch(r"[\])}{(\[;,'\"]*", line)]

    def runs(code: str) -> set[tuple[str, ...]]:
        found = lines(code)
        return {tuple(found[index:index + window]) for index in range(len(found) - window + 1)}

    known = set().union(*(runs(source) for source in sources.values()))
    return ["\n".join(run) for run in sorted(runs(text) & known)]


def test_the_templates_own_files_repeat_no_code_of_sims_sources():
    """A fix is made once: no file of the template's own folder repeats 4 consecutive lines of sim's driver or
    package, compared under the template's spelling of the name (the check is this test's own, since duplicate
    finders skip .jinja files)."""
    package, driver = sim_sources()
    rename = renamer("{{ name }}")
    sources = {str(path): rename(path.read_text()) for folder in (package, driver) for path in folder.rglob("*")
               if path.suffix in (".py", ".cpp", ".h") and "__pycache__" not in path.parts}
    repeated = {str(path.relative_to(TEMPLATE)): found for path in TEMPLATE.rglob("*") if path.is_file()
                and "__pycache__" not in path.parts and (found := repeated_lines(path.read_text(), sources))}
    assert not repeated, repeated
    guard = next(text for path, text in sources.items() if path.endswith("csrc/guard.cpp"))
    assert repeated_lines("# a vendor's note\n" + "\n".join(guard.splitlines()[40:52]), sources)


def test_new_writes_the_tree_into_torch_name_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = new_backend("otherdev")
    assert folder == Path("torch_otherdev")
    written = {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}
    assert written == {str(path) for path in render("otherdev")}
    assert 'otherdev = "torch_otherdev.autoload:initialize"' in (folder / "pyproject.toml").read_text()


def test_every_template_file_is_package_data_of_the_explorer():
    """An installed (not editable) explorer ships the whole template: pyproject's package-data globs cover it."""
    import fnmatch
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["pu1_explorer"]
    files = [path.relative_to(TEMPLATE.parent).as_posix() for path in TEMPLATE.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts]

    def matches(name: str, pattern: str) -> bool:  # setuptools' globs: `*` stays inside one folder
        parts, pattern_parts = name.split("/"), pattern.split("/")
        return len(parts) == len(pattern_parts) and all(map(fnmatch.fnmatch, parts, pattern_parts))

    assert files and not [name for name in files if not any(matches(name, pattern) for pattern in patterns)]


# -------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", ["cuda", "meta", "privateuseone", "xpu", "mps", "nn", "linalg", "MyDev", "9dev",
                                  "my-dev", "dev2", "", "class"])
def test_a_name_torch_uses_or_an_invalid_one_is_refused_in_one_line(name):
    with pytest.raises(NewBackendError) as raised:
        check_name(name)
    message = str(raised.value)
    assert "\n" not in message and "NAME must be lowercase letters and underscores" in message


def test_the_loaded_privateuse1_backends_name_is_refused():
    loaded = torch.device("privateuseone").type
    with pytest.raises(NewBackendError, match="already a torch device type"):
        check_name(loaded)


def test_a_non_empty_folder_is_refused_and_nothing_is_written(tmp_path):
    (tmp_path / "mine.txt").write_text("the user's file")
    with pytest.raises(NewBackendError, match="not empty"):
        new_backend(DEVICE, tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["mine.txt"]
    assert (tmp_path / "mine.txt").read_text() == "the user's file"


def test_cli_refuses_a_bad_name_in_one_line_and_writes_nothing(tmp_path):
    result = run_explorer("new", "cuda", "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "pu1-explorer: error: NewBackendError: device name 'cuda' is already a torch device type"), lines
    assert not (tmp_path / "out").exists()


def test_a_build_without_a_compiler_is_one_clear_line(tmp_path):
    source = new_backend(DEVICE, tmp_path / "source")
    result = pip("install", "--no-build-isolation", "--no-deps", "--target", str(tmp_path / "site"), str(source),
                 timeout=600, CXX="no-such-compiler", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode != 0
    assert "error: the C++ compiler 'no-such-compiler' was not found; install g++" in result.stdout + result.stderr


# -------------------------------------------------------------- built and graded


def test_the_generated_backend_computes_on_two_devices(vendor_backend):
    result = run_forked(["-c", textwrap.dedent("""
        import json, torch, torch_mydev
        x = torch.arange(6.0).to("mydev:1")
        z = torch.randn(5, dtype=torch.complex64)
        lazy = z.to("mydev").conj().neg()  # copies keep the lazy conjugate and negative bits
        print(json.dumps({"device": str(x.device), "sum": (x * 2).sum().item(), "count": torch.mydev.device_count(),
                          "t": x.view(2, 3).t().cpu().tolist(), "name": torch.device("privateuseone").type,
                          "lazy bits": torch.equal(lazy.cpu(), z.conj().neg()),
                          "ihfft": torch.allclose(torch.fft.ihfft(x).cpu(), torch.fft.ihfft(x.cpu()))}))
    """)], **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"device": "mydev:1", "sum": 30.0, "count": 2, "t": [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]],
                   "name": "mydev", "lazy bits": True, "ihfft": True}


def test_the_generated_backends_views_share_their_tensors_memory(vendor_backend):
    """The views the fallback cannot serve (its copy shares no memory) have kernels: a write through each reaches
    the tensor it views."""
    result = run_forked(["-c", textwrap.dedent("""
        import json, torch, torch_mydev
        z = torch.zeros(3, dtype=torch.complex64, device="mydev")
        torch.view_as_real(z)[:, 0] = 1.0
        z.imag.fill_(2.0)
        x = torch.zeros(6, device="mydev")
        x.unfold(0, 2, 2)[:, 1] = 3.0
        pairs = torch.zeros(2, 2, device="mydev")
        torch.view_as_complex(pairs).add_(1j)
        print(json.dumps({"z": str(z.cpu().tolist()), "x": x.cpu().tolist(), "pairs": pairs.cpu().tolist()}))
    """)], **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"z": str([complex(1, 2)] * 3), "x": [0.0, 3.0] * 3, "pairs": [[0.0, 1.0], [0.0, 1.0]]}, out
    assert "appears to be a view operator" not in result.stderr, result.stderr[-2000:]


def test_torch_compile_on_the_generated_backend_matches_eager_and_imports_inductor_lazily(vendor_backend):
    """Importing the backend imports neither dynamo nor inductor; compiled embedding (indirect indexing), softmax,
    torch.cond and a small MLP's forward and backward match eager, and code compiled for the second device returns
    its results there."""
    result = run_forked(["-c", textwrap.dedent("""
        import copy, json, sys, torch, torch_mydev
        lazy = not any(name in sys.modules for name in ("torch._dynamo", "torch._inductor"))
        lazy = lazy and not hasattr(torch.mydev, "NoSuchAttribute")
        torch.manual_seed(0)
        x, table, ids = torch.randn(6, 8), torch.randn(10, 8), torch.tensor([3, 0, 9, 3])
        def features(x, table, ids):
            picked = torch.nn.functional.embedding(ids, table)
            return torch.cond(x.sum() > 0, lambda x: x.softmax(-1), lambda x: x.tanh(), (x,)), picked * 2
        mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        on_device = copy.deepcopy(mlp).to("mydev")
        torch.compile(on_device)(x.to("mydev")).pow(2).sum().backward()
        mlp(x).pow(2).sum().backward()
        compiled = torch.compile(features)(x.to("mydev"), table.to("mydev"), ids.to("mydev"))
        close = [torch.allclose(got.cpu(), want, atol=1e-5) for got, want in zip(compiled, features(x, table, ids))]
        second = torch.compile(lambda t: (t * 2).relu() + 1)(x.to("mydev:1"))
        close.append(second.device == torch.device("mydev:1") and torch.equal(second.cpu(), (x * 2).relu() + 1))
        grads = zip(on_device.parameters(), mlp.parameters())
        close += [torch.allclose(a.grad.cpu(), b.grad, atol=1e-5) for a, b in grads]
        print(json.dumps({"lazy": lazy, "on device": all(t.device.type == "mydev" for t in compiled), "close": close}))
    """)], timeout=600, **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"lazy": True, "on device": True, "close": [True] * 7}, out


def test_compiled_conv2d_on_the_generated_backend_matches_eager_in_either_memory_format(vendor_backend):
    """The template's convolutions return the contiguous strides inductor plans for a PrivateUse1 device: compiled
    conv2d, contiguous and channels-last, in training (weight and bias gradients) and under no_grad, matches eager."""
    result = run_forked(["-c", textwrap.dedent("""
        import json, torch, torch_mydev
        outcome = {}
        for layout in (torch.contiguous_format, torch.channels_last):
            for training in (True, False):
                torch.compiler.reset()
                torch.manual_seed(0)
                reference = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
                model = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2).to("mydev", memory_format=layout)
                model.load_state_dict(reference.state_dict())
                x = torch.randn(2, 3, 16, 16).to(memory_format=layout)
                with torch.set_grad_enabled(training):
                    compiled, expected = torch.compile(model)(x.to("mydev")), reference(x)
                close = [model(x.to("mydev")).is_contiguous(), torch.allclose(compiled.cpu(), expected, atol=1e-5)]
                if training:
                    compiled.square().sum().backward()
                    expected.square().sum().backward()
                    close += [torch.allclose(model.weight.grad.cpu(), reference.weight.grad, atol=1e-4),
                              torch.allclose(model.bias.grad.cpu(), reference.bias.grad, atol=1e-4)]
                outcome[f"{layout} training={training}"] = close
        print(json.dumps(outcome))
    """)], timeout=600, **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {f"{layout} training={training}": [True] * (4 if training else 2)
                   for layout in ("torch.contiguous_format", "torch.channels_last") for training in (True, False)}, out


def test_the_commands_of_the_generated_ci_workflow_pass_and_write_junit_and_the_scorecard(vendor_backend):
    """The commands with which the generated project's CI workflow tests it (.github/workflows/ci.yml, its pinned
    job), run here as they stand on the built backend: the scorecard, which writes its HTML page and the device-generic
    tests' configuration, then `pytest tests` (the scorecard test, PyTorch's device-generic OpInfo tests with that
    configuration, two-rank torch.distributed and dynamo's device interface), which passes and writes JUnit files in
    which nothing failed (the generated backend leaves no probe to the vendor). The workflow's scorecard grades every
    probe and the quick OpInfo sweeps: each of the template's steps and both sweeps passed, none was skipped."""
    source = vendor_source(Path(vendor_backend["PYTHONPATH"]))
    commands = workflow_test_commands((source / ".github" / "workflows" / "ci.yml").read_text())
    assert [command.split()[0] for command in commands] == ["pu1-explorer", "python"], commands
    shutil.rmtree(source / "scorecard", ignore_errors=True)
    for junit in ("scorecard.xml", "test-results.xml"):
        (source / junit).unlink(missing_ok=True)
    (source / "scorecard").mkdir()  # the workflow's `mkdir -p scorecard`
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    environment.update(vendor_backend, DEVICE_TESTS="scorecard/device_tests.json")  # the workflow's Tests step
    for command in commands:
        program, *arguments = shlex.split(command)
        start = {"python": [sys.executable], "pu1-explorer": [sys.executable, "-m", "pu1_explorer"]}[program]
        result = subprocess.run(start + arguments, cwd=source, capture_output=True, text=True, timeout=900,
                                env=environment)
        assert result.returncode == 0, (command, result.stdout[-3000:] + result.stderr[-3000:])
    assert (source / "scorecard" / "scorecard.html").is_file() and (source / "scorecard" / "device_tests.json").is_file()
    card = json.loads((source / "scorecard" / "scorecard.json").read_text())
    statuses = {probe["name"]: probe["status"] for probe in card["probes"]}
    expected = [*PASSING_PROBES, "opinfo differential", "opinfo bad inputs"]
    assert card["opinfo"] == "quick"
    assert not {name: statuses.get(name) for name in expected if statuses.get(name) != "passed"}
    for junit in ("scorecard.xml", "test-results.xml", "scorecard/scorecard.xml"):
        cases = list(ElementTree.parse(source / junit).iter("testcase"))
        failures = {case.get("name") for case in cases if case.find("failure") is not None}
        assert cases and failures == set(), (junit, failures)


# sim's tests of its asynchronous device and of discrete memory, and the modules they need
SIMS_DEVICE_TESTS = ("backend/test_kernel_launch.py", "backend/test_streams_events.py", "backend/test_discrete_memory.py")
THEIR_MODULES = ("__init__.py", "conftest.py", "backend/__init__.py", "backend/host_reads_device_memory.py",
                 "backend/device_sleeps.py")


def test_sims_asynchronous_device_and_discrete_memory_tests_pass_on_the_generated_backend(vendor_backend, tmp_path):
    """sim's own tests of kernel launches, streams, events and discrete memory, renamed as `pu1-explorer new` renames
    sim's code, pass on the generated backend: all but the one that reruns every step's test file with discrete
    memory, which grades sim's test suite rather than the device, and the scorecard's run with discrete memory: the
    generated workflow's test grades the generated backend's scorecard, and sim's runs with discrete memory."""
    rename = renamer(DEVICE)
    tests = Path(__file__).resolve().parents[1]
    for name in (*THEIR_MODULES, *SIMS_DEVICE_TESTS):
        copy = tmp_path / "tests" / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(rename((tests / name).read_text()))
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    environment.update(vendor_backend)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                             "not every_steps_tests and not scorecard_with_its_quick_sweeps", "tests"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=1200, env=environment)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    passed = re.search(r"(\d+) passed", result.stdout.strip().splitlines()[-1])
    assert passed and int(passed.group(1)) >= 30 and " skipped" not in result.stdout.splitlines()[-1], result.stdout[-500:]


def test_import_torch_autoloads_the_generated_backend_and_sim_steps_aside(vendor_backend):
    environment = {"PYTHONPATH": vendor_backend["PYTHONPATH"]}
    statuses = run_scorecard(environment, imports=[], probes=["autoload"])
    assert statuses["autoload"][0] == "passed", statuses["autoload"]


def test_the_build_of_make_setup_is_reused_only_while_newer_than_the_template(tmp_path):
    """build_vendor_backend returns set-up's installed folder while its library is newer than every template file,
    else this run's own folder (here one that is already installed, so that nothing compiles)."""
    def installed(target: Path) -> Path:
        library = target / f"torch_{DEVICE}" / "_C.cpython-311-x86_64-linux-gnu.so"
        library.parent.mkdir(parents=True)
        library.write_bytes(b"")
        (vendor_source(target) / "tests").mkdir(parents=True)
        return library

    setup_library, own = installed(tmp_path / "setup" / f"{DEVICE}-backend"), tmp_path / "run" / f"{DEVICE}-backend"
    installed(own)
    assert build_vendor_backend(tmp_path / "run", reuse=setup_library.parents[1]) == setup_library.parents[1]
    os.utime(setup_library, (0, 0))  # older than the template
    assert build_vendor_backend(tmp_path / "run", reuse=setup_library.parents[1]) == own


def test_next_kernels_ranks_the_generated_backends_missing_kernels_by_the_zoos_demand(vendor_backend, tmp_path):
    """Another backend, measured in its own process: the generated backend lacks the kernels sim lacks, ranked alike
    (each one runs on the CPU fallback, and the zoo's models reach it)."""
    def ranked(device: str, environment: dict[str, str]) -> dict:
        result = run_explorer("next-kernels", "--device", device, "--top", "10", "--format", "json", timeout=600,
                              cwd=tmp_path, **environment)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    on_mydev, on_sim = ranked(DEVICE, vendor_backend), ranked("sim", {})
    assert on_mydev["label"] == DEVICE and on_mydev["needs"] and on_mydev["missing"] == on_sim["missing"]
    assert [need["operator"] for need in on_mydev["needs"]] == [need["operator"] for need in on_sim["needs"]]
    assert all(need["today"] == "falls back to the CPU" for need in on_mydev["needs"])
