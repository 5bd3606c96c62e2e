"""Shared test set-up: the sim backend is autoloaded by `import torch`; fallback warnings are off by default."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the long sweeps marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow") or os.environ.get("SIM_FULL_OPINFO") == "1":
        return
    skip_slow = pytest.mark.skip(reason="a long sweep: run with --run-slow or SIM_FULL_OPINFO=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built lives as long as the run: it is moved out of the garbage collector's sight, so that each
    full collection (settled_memory's, Python's own) scans only what the tests made."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def silent_fallback():
    """Tests that look at fallback warnings set the policy themselves; the rest run silently."""
    torch.sim.set_fallback_policy("silent")
    yield
    torch.sim.set_fallback_policy("silent")


@pytest.fixture(autouse=True)
def current_device_zero():
    """Every test starts on sim:0, whatever device the test before it made current."""
    torch.sim.set_device(0)
    yield
    torch.sim.set_device(0)


@pytest.fixture
def settled_memory():
    """Memory figures hold still: garbage from earlier tests is freed first, and no collection frees more mid-test."""
    gc.collect()
    torch.sim.synchronize()
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def small_device_one():
    """Device 1 with a 1 MiB capacity, restored afterwards."""
    original = torch.sim.get_memory_capacity(1)
    torch.sim.empty_cache()
    torch.sim.set_memory_capacity(1 << 20, device=1)
    yield
    torch.sim.set_memory_capacity(original, device=1)


def run_python(code: str, timeout: float = 180, cwd=None, **environment: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with extra environment variables; never raises on failure."""
    env = {**os.environ, "SIM_FALLBACK": "silent", **environment}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=cwd)


def run_forked(argv: list[str], timeout: float = 180, cwd=None, **environment: str) -> subprocess.CompletedProcess:
    """`python *argv` in a fresh process forked from a template that has imported torch (pu1_explorer.forkserver, as
    the scorecard and the guide's checks run theirs), with extra environment variables; never raises on failure.
    For tests whose subject is what a program does, not how an interpreter starts: about 0.3 s a process, not 3 s."""
    return fork_and_run(argv, timeout, cwd, {"SIM_FALLBACK": "silent", **environment})


def run_explorer(*arguments: str, timeout: float = 300, cwd=None, **environment: str) -> subprocess.CompletedProcess:
    """The command line `python -m pu1_explorer ARGUMENTS` with extra environment variables, forked as `run_forked`
    forks: the subject is what the command prints and returns; never raises on failure."""
    return fork_and_run(["-m", "pu1_explorer", *arguments], timeout, cwd, environment)


def fork_and_run(argv: list[str], timeout: float, cwd, environment: dict[str, str]) -> subprocess.CompletedProcess:
    """`python *argv` forked from this process's template for this environment plus `environment`."""
    from pu1_explorer import forkserver

    return forkserver.run(argv, {**os.environ, **environment}, timeout, cwd=None if cwd is None else str(cwd))


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory) -> Path:
    """The project built into a wheel from a copy of its sources: once per test run, by whichever worker needs it
    first while the others wait, since compiling the C++ parts takes minutes."""
    from filelock import FileLock

    from tests.environments import build_wheel, project_sources

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's folder, for every worker
    root = shared / "project-wheel"
    with FileLock(str(shared / "project-wheel.lock")):
        built = sorted((root / "dist").glob("*.whl"))
        return built[0] if built else build_wheel(project_sources(root / "source"), root / "dist")


@pytest.fixture(scope="session")
def installed_wheel(project_wheel, tmp_path_factory) -> Path:
    """The wheel installed into a folder of its own, as pip would install it into site-packages."""
    from tests.environments import install_into

    return install_into(tmp_path_factory.mktemp("installed") / "site", project_wheel)


@pytest.fixture(scope="session")
def fixture_backend_env() -> dict[str, str]:
    """The environment under which a fresh interpreter can `import torch_toy`, the second C++ backend (examples/toy):
    the build that `make setup` installed in build/toy-backend, rebuilt there first if a source is newer; one
    worker checks (and builds) while the others wait."""
    from filelock import FileLock

    from tests.toy_backend import TOY_BUILD, build_toy_backend

    TOY_BUILD.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(TOY_BUILD.parent / "toy-backend.lock")):
        return build_toy_backend(TOY_BUILD)
