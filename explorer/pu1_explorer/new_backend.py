"""`pu1-explorer new NAME`: a vendor's own out-of-tree PrivateUse1 backend, ready to build, made from sim's own code.

A generated backend is sim under another name: its fake driver (backend/simdriver -> NAMEdriver/) and its
integration (backend/torch_sim -> src/torch_NAME/, the C++ in csrc/ and the Python package around it), with every
name renamed (`sim` -> NAME, `Sim` -> Name, `SIM_` -> NAME_, `torch_sim` -> torch_NAME, `simdriver` ->
NAMEdriver), so the code every guide page shows is the code a vendor starts from, and a fix is made once.
The template (`vendor_template/`, package data of the explorer) holds only what differs: the packaging, the
README, the autoload entry point (a vendor's backend claims PrivateUse1, where sim steps aside) and the
tests; its files are rendered with Jinja for the name (`name`, `NAME` in capitals); a `.jinja` suffix is
dropped and its folder `package/` goes into `src/torch_NAME/`.
"""
from __future__ import annotations

import functools
import importlib.util
import keyword
import re
from pathlib import Path

TEMPLATE = Path(__file__).parent / "vendor_template"
PACKAGE_FOLDER = "package"
_NAME_PATTERN = re.compile(r"[a-z][a-z_]*")  # what torch.device() parses as a device type, in lowercase
# sim's Python files that are not part of a backend: the demo runs the explorer's workloads.
LEFT_OUT = frozenset({"demo.py"})
_SOURCE_SUFFIXES = {".py", ".cpp", ".h", ".json"}
EXAMPLE_DEVICE = "mydev"  # the device name the guide's pages show a vendor's paths for


class NewBackendError(ValueError):
    """The name or the folder given to `new_backend` cannot be used (the message says why, in one line)."""


def device_types_torch_knows() -> list[str]:
    """Every device type torch.device() accepts, read from torch's own error message for an unknown one, and the
    name of this process's PrivateUse1 backend (the message keeps calling it privateuseone)."""
    import torch

    try:
        torch.device("pu_explorer_no_such_device")
    except RuntimeError as error:
        listed = re.search(r"Expected one of (.*?) device type", str(error))
        if listed:
            names = [name.strip() for name in listed.group(1).split(",")]
            return names + [torch.device("privateuseone").type]
    raise RuntimeError("could not read torch's list of device types from torch.device's error message")


def check_name(name: str) -> None:
    """Refuse a device name that torch.device() cannot parse (lowercase letters and underscores here), or that torch
    already uses.

    torch already uses a name when torch.device() knows it as a device type (cpu, cuda, meta, xpu, mps,
    privateuseone, and whatever the PrivateUse1 backend of this process is called) or when `torch.<name>`
    exists (torch.nn, torch.linalg, ...), because `torch._register_device_module` refuses those.
    """
    import torch

    rule = ("NAME must be lowercase letters and underscores, a letter first (what torch.device() accepts), and not "
            "a device type or a torch.<name> attribute torch already has")
    if not _NAME_PATTERN.fullmatch(name or "") or keyword.iskeyword(name):
        raise NewBackendError(f"invalid device name {name!r}: {rule}")
    if name in device_types_torch_knows():
        raise NewBackendError(f"device name {name!r} is already a torch device type: {rule}")
    if hasattr(torch, name):
        raise NewBackendError(f"device name {name!r} is taken: torch.{name} exists; {rule}")


def check_folder(folder: Path) -> None:
    """Refuse a destination that exists and is not an empty folder: nothing of the user's is ever overwritten."""
    if folder.is_dir() and any(folder.iterdir()):
        raise NewBackendError(f"{folder} already exists and is not empty; give a new or empty folder with -o")
    if folder.exists() and not folder.is_dir():
        raise NewBackendError(f"{folder} exists and is a file; give a new or empty folder with -o")


def sim_sources() -> tuple[Path, Path]:
    """sim's package folder (its Python, csrc/ and checks/) and its driver's folder, found without importing sim:
    the driver is backend/simdriver beside the package in a checkout, and torch_sim/simdriver in a wheel."""
    found = importlib.util.find_spec("torch_sim")
    package = Path(found.origin).parent if found is not None and found.origin else None
    if package is not None:
        for driver in (package / "simdriver", package.parent / "simdriver"):
            if (driver / "include").is_dir() and (package / "csrc").is_dir():
                return package, driver
    raise NewBackendError("pu1-explorer new copies sim's sources, which are not installed beside the explorer; "
                          "reinstall privateuse1-explorer (`make setup` in its checkout)")


def renamer(name: str) -> functools.partial:
    """A function that renames sim in a text or a path: `sim` -> name, `Sim` -> Name, `SIM` -> NAME (as a word or
    a prefix: simMalloc, SimAllocator, kSimDevice, SIM_TRACE, torch_sim, simdriver, simccl), and sim's folders to
    the generated project's. Words that merely start with the letters (simulated, similar, SimpleNamespace) stay."""
    camel = "".join(part.capitalize() for part in name.split("_"))
    rules = (
        (re.compile(r"backend/torch_sim\b"), f"src/torch_{name}"),
        (re.compile(r"backend/simdriver\b"), f"{name}driver"),
        (re.compile(r"(?<![A-Za-z0-9])(\\n)?sim(?![a-z])|(?<![A-Za-z0-9])sim(?=driver|ccl)"),
         lambda match: (match.group(1) or "") + name),
        (re.compile(r"(?<![A-Za-z0-9])SIM(?![A-Z])|(?<![A-Za-z0-9])SIM(?=DRIVER)"), name.upper()),
        (re.compile(r"(?<![A-Za-z0-9])(k?)Sim(?![a-z])"), lambda match: match.group(1) + camel),
    )
    return functools.partial(_rename, rules)


def _rename(rules: tuple, text: str) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _sim_files(name: str) -> dict[Path, str]:
    """sim's driver and integration under `name`, as {path in the generated project: text}."""
    package, driver = sim_sources()
    rename = renamer(name)
    files = {}
    for folder, where in ((driver, "backend/simdriver"), (package, "backend/torch_sim")):
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            in_wheels_driver_copy = folder == package and relative.parts[0] == "simdriver"
            if not path.is_file() or "__pycache__" in relative.parts or in_wheels_driver_copy:
                continue
            generated = generated_path(f"{where}/{relative.as_posix()}", name)
            if generated is not None:
                files[Path(generated)] = rename(path.read_text())
    return files


def _destination(relative: Path, name: str) -> Path:
    parts = list(relative.parts)
    if parts[0] == PACKAGE_FOLDER:
        parts[0:1] = ["src", f"torch_{name}"]
    parts[-1] = parts[-1].removesuffix(".jinja")
    return Path(*parts)


def render(name: str) -> dict[Path, str]:
    """The generated backend for `name` as {relative path: text}, without writing anything: sim's sources renamed,
    then the template's own files (which replace a renamed file of the same path)."""
    import jinja2

    files = _sim_files(name)
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     autoescape=False)
    for source in sorted(path for path in TEMPLATE.rglob("*") if path.is_file() and "__pycache__" not in path.parts):
        template = environment.from_string(source.read_text())
        files[_destination(source.relative_to(TEMPLATE), name)] = template.render(name=name, NAME=name.upper())
    return files


def generated_path(source: str, name: str) -> str | None:
    """Where a file of sim (a path in the project, e.g. backend/torch_sim/csrc/guard.cpp) lands in the backend that
    `pu1-explorer new name` generates (src/torch_name/csrc/guard.cpp); None for a path that is not a source of sim's."""
    if (not source.startswith(("backend/torch_sim/", "backend/simdriver/")) or Path(source).name in LEFT_OUT
            or Path(source).suffix not in _SOURCE_SUFFIXES):
        return None
    return renamer(name)(source)


def new_backend(name: str, folder: str | Path | None = None) -> Path:
    """Write the backend for device `name` into `folder` (default ./torch_NAME); return the folder.

    Raises NewBackendError, before writing anything, for a bad name or a non-empty folder.
    """
    check_name(name)
    destination = Path(folder) if folder is not None else Path(f"torch_{name}")
    check_folder(destination)
    files = render(name)
    for relative, text in files.items():
        path = destination / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return destination


