"""`pu1-explorer new NAME`: a vendor's own out-of-tree PrivateUse1 backend, ready to build, from the template.

The template (`vendor_template/`, package data of the explorer) is a complete backend: one C++ file per
guide step, a fake vendor runtime on host memory, the Python package, a scorecard test and a README.
Every file is rendered with Jinja for the device's name (`name`, `NAME` in capitals); a file name's
`.jinja` suffix is dropped and the folder `package/` becomes `src/torch_NAME/` (a src layout: in the project
folder, the source package cannot shadow the installed one, which has the compiled library). Guide excerpts are the
regions between `[guide: STEP]` and `[/guide: STEP]` markers in the rendered sources; `vendor_excerpts()` collects
them per step, for the name `mydev`, as each guide page's "what a vendor writes".
"""
from __future__ import annotations

import functools
import keyword
import re
from dataclasses import dataclass
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
    """The regions of a rendered source between `[guide: STEP]` and `[/guide: STEP]` markers, joined per step.

    Regions of different steps may overlap or nest; marker lines are never part of an excerpt.
    """
    excerpts: dict[str, list[str]] = {}
    open_regions: dict[str, list[str]] = {}
    for line in text.splitlines():
        marker = _MARKER.match(line)
        if marker and not marker.group(1):
            open_regions[marker.group(2)] = []
        elif marker and marker.group(2) in open_regions:
            excerpts.setdefault(marker.group(2), []).append("\n".join(open_regions.pop(marker.group(2))))
        elif not marker:
            for lines in open_regions.values():
                lines.append(line)
    return {step: "\n\n".join(parts) for step, parts in excerpts.items()}


EXCERPT_DEVICE = "mydev"  # the device name the guide's excerpts of the template are generated for
_LANGUAGES = {".cpp": "cpp", ".h": "cpp", ".py": "python", ".toml": "toml"}  # pygments lexer names


@dataclass(frozen=True)
class VendorExcerpt:
    """What a vendor writes for a guide step: the marked regions of one file of the generated backend."""

    step: str
    path: str  # the file's path in the generated project folder, e.g. "csrc/guard.cpp"
    text: str
    language: str  # a pygments lexer name
    device: str  # the name the backend was generated for

    @property
    def caption(self) -> str:
        """The line a guide page shows above the excerpt (`code` spans)."""
        return f"What a vendor writes: `{self.path}` of `pu1-explorer new {self.device}`"


@functools.lru_cache(maxsize=4)
def _excerpts_of(name: str) -> tuple[VendorExcerpt, ...]:
    found = []
    for path, text in render(name).items():
        language = _LANGUAGES.get(path.suffix)
        if language is None:
            continue
        found += [VendorExcerpt(step, path.as_posix(), excerpt, language, name)
                  for step, excerpt in guide_excerpts(text).items()]
    return tuple(found)


def vendor_excerpts(name: str = EXCERPT_DEVICE) -> dict[str, tuple[VendorExcerpt, ...]]:
    """Every guide step's excerpts of the backend generated for `name` (rendered once per name), one per file:
    the file named after the step first (csrc/guard.cpp for "guard"), then C++, TOML and Python files."""
    if not _NAME_PATTERN.fullmatch(name or ""):
        raise NewBackendError(f"invalid device name {name!r} for the guide's excerpts: lowercase letters and "
                              "underscores, a letter first")
    by_step: dict[str, list[VendorExcerpt]] = {}
    for excerpt in _excerpts_of(name):
        by_step.setdefault(excerpt.step, []).append(excerpt)
    order = {language: rank for rank, language in enumerate(("cpp", "toml", "python"))}
    return {step: tuple(sorted(excerpts, key=lambda excerpt: (Path(excerpt.path).stem != step,
                                                              order[excerpt.language])))
            for step, excerpts in by_step.items()}
