"""Builds the two compiled parts at install time, as vendor extensions do.

`torch_sim._C` is sim's C++ runtime core (every file in backend/torch_sim/csrc/) and
`pu1_explorer._native` is the explorer's small helper. Both compile against the torch
they will run with, so install with `pip install --no-build-isolation .` (or `-e .`)
after torch itself; `import torch` never compiles anything.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
NO_TORCH = (
    "building privateuse1-explorer needs torch installed first, the same torch it will run with: "
    "`pip install -c constraints.txt torch` then `pip install --no-build-isolation -c constraints.txt .` "
    "(`make setup` does both)"
)

# An installed (maybe older or damaged) sim must not load while its replacement builds.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
# When the compiler runs through ccache (`make setup` puts Debian's first on PATH), a copy of this tree in
# another folder, such as the wheel the tests build, reuses the cached objects: ccache then hashes paths
# inside the tree relative to the build folder, and ignores the working folder that -g would record.
os.environ.setdefault("CCACHE_BASEDIR", str(ROOT.resolve()))
os.environ.setdefault("CCACHE_NOHASHDIR", "1")
# One build folder inside the tree for wheels and editable installs alike (not a new temporary folder per
# editable install), so that the compile commands are the same in every copy and ninja can rebuild incrementally.
BUILD_FOLDER = ROOT.resolve() / "build" / "cxx"
try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
except ImportError:
    sys.exit(f"error: {NO_TORCH}")


def first_compiler_error(log: str) -> str:
    """The line of a compiler log that says what went wrong (the first 'error' line, else the last line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for pattern in (r"\berror\b:", r"\berror\b", r"not found|No such file"):
        for line in lines:
            if re.search(pattern, line) and not line.startswith(("FAILED:", "ninja: build stopped")):
                return line
    return lines[-1] if lines else "(the compiler printed nothing)"


class BuildCore(BuildExtension):
    """BuildExtension that checks the toolchain first and reports a failed compile in one line."""

    def build_extensions(self) -> None:
        self._check_toolchain()
        self.build_temp = str(BUILD_FOLDER)
        super().build_extensions()

    def _check_toolchain(self) -> None:
        compilers = {os.environ.get("CXX", "c++"), self.compiler.compiler_so[0], self.compiler.linker_so[0]}
        for compiler in sorted(compilers):
            if shutil.which(compiler) is None:
                sys.exit(f"error: the C++ compiler {compiler!r} was not found; install g++ "
                         "(`apt-get install g++`) or point CXX and CC at a working compiler")
        headers = {"Python.h": [Path(sysconfig.get_paths()["include"])],
                   "torch/extension.h": [Path(folder) for folder in include_paths()]}
        for header, folders in headers.items():
            if not any((folder / header).exists() for folder in folders):
                folder = folders[0]
                hint = "install Python's development headers (`apt-get install python3-dev`)" \
                    if header == "Python.h" else "reinstall torch"
                sys.exit(f"error: the header {header} is missing from {folder}; {hint}")

    def build_extension(self, extension) -> None:
        log_path = Path(tempfile.mkdtemp(prefix="sim-build-")) / f"{extension.name}.log"
        print(f"compiling {extension.name} from {len(extension.sources)} C++ file(s) (a few minutes on 2 cores); "
              f"log: {log_path}", file=sys.stderr, flush=True)
        with open(log_path, "w") as log:
            saved_out, saved_err = os.dup(1), os.dup(2)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                super().build_extension(extension)
                failure = None
            except (Exception, SystemExit) as error:
                failure = error
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved_out, 1)
                os.dup2(saved_err, 2)
                os.close(saved_out)
                os.close(saved_err)
        if failure is not None:
            reason = first_compiler_error(log_path.read_text(errors="replace") + "\n" + str(failure))
            sys.exit(f"error: compiling {extension.name} failed: {reason}\n(the whole compiler log: {log_path})")


def extension(name: str, folder: str, library: str | None = None) -> list[CppExtension]:
    """The extension compiled from `folder`, with the C library in `library` (its src/ compiled in, its include/
    the only header folder the extension sees of it) linked into the same module."""
    sources = sorted(str(path.relative_to(ROOT)) for path in (ROOT / folder).glob("*.cpp"))
    library_headers = []
    if library is not None:
        sources += sorted(str(path.relative_to(ROOT)) for path in (ROOT / library / "src").glob("*.cpp"))
        library_headers = [str(ROOT / library / "include")]
    if not sources:
        return []
    # kineto's headers (the activity-profiler interface of backend/torch_sim/csrc/profiler.cpp) sit beside torch's.
    kineto = [str(Path(path) / "kineto") for path in include_paths() if (Path(path) / "kineto").is_dir()]
    # -g0: Python's flags ask for debug information, which nearly doubles the compile and makes objects 50x larger.
    # The prefix map keeps __FILE__ (the file:line torch shows for a registration or an error) relative to the
    # project, "backend/torch_sim/csrc/...", also when ccache has made the sources' paths relative to the build folder.
    from_build_folder = os.path.relpath(ROOT.resolve(), BUILD_FOLDER) + "/"
    # -fopenmp: the driver splits large copies over its executor's OpenMP team, the one torch's kernels use there.
    flags = ["-O2", "-g0", "-fopenmp", f"-fmacro-prefix-map={from_build_folder}="]
    # torch's x86-64 builds carry AVX2 and AVX-512 kernels for each DispatchStub; with the same definitions,
    # DispatchStub.h declares them, and operators_direct.cpp can hand the CPU's loops to sim's stubs.
    if platform.machine() in ("x86_64", "AMD64"):
        flags += ["-DHAVE_AVX2_CPU_DEFINITION", "-DHAVE_AVX512_CPU_DEFINITION"]
    return [CppExtension(name, sources, include_dirs=[str(ROOT / folder), *library_headers, *kineto],
                         extra_compile_args=flags, extra_link_args=["-fopenmp"])]


class BuildPackages(build_py):
    """The packages as setuptools builds them, and sim's driver (backend/simdriver) inside torch_sim as package data:
    `pu1-explorer new` copies sim's driver and integration from an installed wheel as from a checkout."""

    def run(self) -> None:
        super().run()
        driver = ROOT / "backend" / "simdriver"
        for path in sorted(driver.rglob("*")):
            if path.is_file() and path.suffix in (".cpp", ".h"):
                copy = Path(self.build_lib) / "torch_sim" / "simdriver" / path.relative_to(driver)
                self.mkpath(str(copy.parent))
                self.copy_file(str(path), str(copy))


if __name__ == "__main__":
    setup(
        ext_modules=(extension("torch_sim._C", "backend/torch_sim/csrc", library="backend/simdriver")
                     + extension("pu1_explorer._native", "explorer/pu1_explorer/csrc")),
        cmdclass={"build_ext": BuildCore.with_options(use_ninja=True), "build_py": BuildPackages},
    )
