"""The C++ core: compiled once and cached; a compile failure is one clear error that names the compiler log."""
from pathlib import Path

import pytest

from backend import runtime_build


def test_the_cached_core_is_reused():
    path = runtime_build.library_path()
    assert path.exists() and path.name == "sim_runtime.so"
    assert runtime_build.load_runtime().device_count() == 2


def test_a_compile_failure_names_the_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SIM_BUILD_DIR", str(tmp_path))
    source = tmp_path / "broken.cpp"
    source.write_text("#include <torch/extension.h>\nthis is not C++;\n")
    with pytest.raises(runtime_build.RuntimeBuildError) as caught:
        runtime_build.load_extension("broken_module", source)
    message = str(caught.value)
    log = Path(message.rsplit("the compiler log is ", 1)[1])
    assert log.exists() and "error" in log.read_text()
    assert "compiling the C++ module broken_module" in capsys.readouterr().err
