"""`pu1-explorer new NAME`: a vendor's own out-of-tree PrivateUse1 backend, ready to build, from the template.

The template (`vendor_template/`, package data of the explorer) is a complete backend: one C++ file per
guide step, a fake vendor runtime on host memory, the Python package, a scorecard test and a README.
Every file is rendered with Jinja for the device's name (`name`, `NAME` in capitals); a file name's
`.jinja` suffix is dropped and the folder `package/` becomes `src/torch_NAME/` (a src layout: in the project
folder, the source package cannot shadow the installed one, which has the compiled library). Guide excerpts are the
regions between `[guide: STEP]` and `[/guide: STEP]` markers in the rendered sources.
"""
from __future__ import annotations

import keyword
import re
from pathlib import Path

TEMPLATE = Path(__file__).parent / "vendor_template"
PACKAGE_FOLDER = "package"
_NAME_PATTERN = re.compile(r"[a-z][a-z_]*")  # what torch.device() parses as a device type, in lowercase
_MARKER = re.compile(r"^\s*(?://|#) \[(/?)guide: ([a-z_]+)\]\s*$")


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
            return names + [torch._C._get_privateuse1_backend_name()]
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


def _destination(relative: Path, name: str) -> Path:
    parts = list(relative.parts)
    if parts[0] == PACKAGE_FOLDER:
        parts[0:1] = ["src", f"torch_{name}"]
    parts[-1] = parts[-1].removesuffix(".jinja")
    return Path(*parts)


def render(name: str) -> dict[Path, str]:
    """The generated backend for `name` as {relative path: text}, without writing anything."""
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     autoescape=False)
    files = {}
    for source in sorted(path for path in TEMPLATE.rglob("*") if path.is_file() and "__pycache__" not in path.parts):
        template = environment.from_string(source.read_text())
        files[_destination(source.relative_to(TEMPLATE), name)] = template.render(name=name, NAME=name.upper())
    return files


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


def guide_excerpts(text: str) -> dict[str, str]:
    """The regions of a rendered source between `[guide: STEP]` and `[/guide: STEP]` markers, joined per step."""
    excerpts: dict[str, list[str]] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        marker = _MARKER.match(line)
        if marker and not marker.group(1):
            current, lines = marker.group(2), []
        elif marker and current == marker.group(2):
            excerpts.setdefault(current, []).append("\n".join(lines))
            current = None
        elif current is not None:
            lines.append(line)
    return {step: "\n\n".join(parts) for step, parts in excerpts.items()}
