"""Fresh Python environments for the install tests.

A fresh environment is a new virtualenv that sees the project venv's packages (torch and
the rest) through a `.pth` file, minus this project, plus whatever a test installs into
folders of its own, in the order the test gives. Entry points are found in that order too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OUR_DISTRIBUTION = ("privateuse1_explorer", "__editable__.privateuse1_explorer", "__editable___privateuse1_explorer")
# Debian's ccache (`make setup` installs it): builds here reuse the objects of set-up's compile (see setup.py).
COMPILER_CACHE = Path("/usr/lib/ccache")


def project_sources(destination: Path) -> Path:
    """Copy the project's files (tracked and new, nothing ignored) into `destination`."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=PROJECT_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = PROJECT_ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def pip(*arguments: str, timeout: float = 900, python: Path = Path(sys.executable),
        **environment: str) -> subprocess.CompletedProcess:
    """The project venv's pip, offline, never raising on failure; it compiles through ccache when that is installed."""
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if COMPILER_CACHE.is_dir():
        env["PATH"] = os.pathsep.join([str(COMPILER_CACHE), env.get("PATH", os.defpath)])
    env.update(environment)
    return subprocess.run([str(python), "-m", "pip", *arguments], capture_output=True, text=True, env=env,
                          timeout=timeout)


def venv_python_inside(copy: Path) -> Path:
    """The project venv's python as the copy `copy` of the project sees it: through a link at the same place in the
    copy when the venv lies inside the project (`make setup`'s .venv). Compiled that way, the copy's compile commands
    name torch's headers by the same paths relative to the tree as set-up's did, so ccache reuses its objects."""
    prefix = Path(sys.prefix)
    if not prefix.is_relative_to(PROJECT_ROOT):
        return Path(sys.executable)
    link = copy / prefix.relative_to(PROJECT_ROOT)
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(prefix, target_is_directory=True)
    return link / Path(sys.executable).relative_to(prefix)


def build_wheel(source: Path, destination: Path) -> Path:
    """`pip wheel` of a project tree, as a vendor would build it; returns the wheel."""
    result = pip("wheel", "--no-build-isolation", "--no-deps", "-w", str(destination), str(source), timeout=1800,
                 python=venv_python_inside(source))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return next(destination.glob("*.whl"))


def install_into(target: Path, requirement: Path) -> Path:
    """Install one wheel or project folder into its own folder (no dependencies)."""
    result = pip("install", "--no-build-isolation", "--no-deps", "--target", str(target), str(requirement))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return target


def shared_packages(root: Path, without: tuple[str, ...] = ()) -> Path:
    """A folder of links to the project venv's packages, minus this project and the names in `without`."""
    folder = root / "shared-site-packages"
    folder.mkdir(parents=True, exist_ok=True)
    excluded = OUR_DISTRIBUTION + tuple(without)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(excluded) or entry.suffix == ".pth":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def fresh_environment(root: Path, *path_entries: Path, without: tuple[str, ...] = ()) -> Path:
    """A new virtualenv whose sys.path is `path_entries` (in order), then the shared packages; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    entries = [*path_entries, shared_packages(root, without)]
    (Path(site) / "paths_for_this_test.pth").write_text("".join(f"{entry}\n" for entry in entries))
    return python


def run_in(python: Path, code: str, cwd: Path | None = None, timeout: float = 300,
           **environment: str) -> subprocess.CompletedProcess:
    """Run `code` with another interpreter; the sim variables of this process do not leak in."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("SIM_", "PYTHON"))}
    env.update(SIM_FALLBACK="silent", **environment)
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


def colliding_folder(root: Path) -> Path:
    """A working folder with its own `backend/` and `explorer/` packages that raise on import."""
    for name in ("backend", "explorer"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text(f"raise ImportError('this is the user\\'s own {name} package')\n")
    return root
