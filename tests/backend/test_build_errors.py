"""A build that cannot work says why in one line, before anything is installed: no torch to build
against, no compiler, or a compile error (named with the compiler's own words)."""
from __future__ import annotations

import pytest

from tests.environments import fresh_environment, pip, project_sources, run_in


@pytest.fixture
def sources(tmp_path):
    return project_sources(tmp_path / "source")


def message_lines(result) -> list[str]:
    return [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip().startswith("error: ")]


def test_a_missing_compiler_is_named(sources, tmp_path):
    result = pip("wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "dist"), str(sources),
                 CXX="/nonexistent/c++", timeout=300)
    assert result.returncode != 0
    assert ("error: the C++ compiler '/nonexistent/c++' was not found; install g++ (`apt-get install g++`) "
            "or point CXX and CC at a working compiler") in message_lines(result), result.stdout[-2000:]
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_a_compile_error_is_named_with_the_compilers_words(sources, tmp_path):
    for source in (sources / "backend" / "torch_sim" / "csrc").glob("*.cpp"):
        source.unlink()
    (sources / "backend" / "torch_sim" / "csrc" / "runtime.cpp").write_text("#include <sim_missing_header.h>\n")
    result = pip("wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "dist"), str(sources),
                 timeout=300)
    assert result.returncode != 0
    failure = [line for line in message_lines(result) if line.startswith("error: compiling torch_sim._C failed:")]
    assert failure, result.stdout[-3000:]
    assert "sim_missing_header.h: No such file or directory" in failure[0]
    assert "(the whole compiler log:" in result.stdout + result.stderr


def test_building_without_torch_says_to_install_torch_first(sources, tmp_path):
    python = fresh_environment(tmp_path, without=("torch", "functorch", "torchgen"))
    result = run_in(python, "import runpy, sys; sys.argv = ['setup.py', 'build_ext']; runpy.run_path('setup.py', "
                            "run_name='__main__')", cwd=sources)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: building privateuse1-explorer needs torch installed first, the same torch it will run with")
