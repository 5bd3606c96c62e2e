"""sim's fake driver (backend/simdriver/) compiled with its own C++ tests, which are then run: the driver's
promises (asynchronous streams, events, copies, discrete memory, errors, fork and exit) are checked in C++,
without torch. Every C++ test must pass, and all of them must have run."""
from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("simdriver")  # one worker compiles the driver's tests once

DRIVER = Path(__file__).resolve().parents[2] / "backend" / "simdriver"
FLAGS = ["-O2", "-std=c++17", "-pthread", "-fopenmp", "-Wall", "-Wextra", f"-I{DRIVER / 'include'}"]
COMPILE_SECONDS = 300
RUN_SECONDS = 600


def compiler(name: str) -> list[str]:
    """The compiler's command, through ccache when it is on PATH (as `make setup` compiles)."""
    if shutil.which(name) is None:
        pytest.fail(f"the C++ tests of sim's driver need {name}; install it (`apt-get install g++`)")
    return ["ccache", name] if shutil.which("ccache") else [name]


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def driver_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver and its tests, compiled file by file (two at a time) and linked into one program."""
    build = tmp_path_factory.mktemp("simdriver")
    sources = sorted((DRIVER / "src").glob("*.cpp")) + sorted((DRIVER / "tests").glob("*.cpp"))
    objects = [build / f"{source.parent.name}_{source.stem}.o" for source in sources]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda pair: run([*compiler("g++"), *FLAGS, "-c", str(pair[0]), "-o", str(pair[1])],
                                                 COMPILE_SECONDS), zip(sources, objects)))
    for source, result in zip(sources, results):
        assert result.returncode == 0, f"compiling {source.name} failed:\n{result.stderr}"
        assert not result.stderr.strip(), f"compiling {source.name} warned:\n{result.stderr}"
    program = build / "simdriver_tests"
    linked = run(["g++", "-pthread", "-fopenmp", *map(str, objects), "-o", str(program)], COMPILE_SECONDS)
    assert linked.returncode == 0, linked.stderr
    return program


def test_every_test_of_the_driver_passes(driver_tests: Path) -> None:
    result = run([str(driver_tests)], RUN_SECONDS)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    written = sum(len(re.findall(r"^TEST\(\w+\)", path.read_text(), re.MULTILINE))
                  for path in (DRIVER / "tests").glob("*.cpp"))
    assert written > 0
    assert result.stdout.strip().splitlines()[-1] == f"{written} passed, 0 failed", output


def test_a_failing_driver_test_fails_the_program(driver_tests: Path) -> None:
    # A test of a fresh process run where its environment is wrong fails, and the harness says so.
    result = run([str(driver_tests), "--run", "copies_in_every_direction_here"], RUN_SECONDS)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("FAILED  copies_in_every_direction_here\n"), result.stdout
    assert "CHECK(prop.discreteMemory == 1)" in result.stdout


def test_the_header_is_plain_c() -> None:
    result = run([compiler("gcc")[-1], "-std=c99", "-Wall", "-Wextra", "-pedantic", "-fsyntax-only", "-x", "c",
                  str(DRIVER / "include" / "simdriver.h")], COMPILE_SECONDS)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
