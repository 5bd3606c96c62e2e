"""Every guide page tables the whole interface sim implements for its step, derived from sim's own sources.

What a step implements is read from the code, so a method sim adds and a page forgets fails here:

- A step with C++ (``step.cpp_path``) implements what that file holds:
  * every method it declares ``override`` or ``final`` (destructors aside), whatever class it belongs to;
  * every registration call: a dispatcher registration (``m.impl("op")`` names the operator, ``m.fallback(...)``
    is ``fallback``), a registration function or macro (``Register*``/``register*`` calls, ``*REGISTER*``,
    ``TORCH_LIBRARY*``, ``*PRIVATEUSE1*``/``*PRIVATEUSEONE*`` macros, ``Set*Allocator``/``set*Allocator``,
    ``*Registrar``/``*Registry`` objects, ``set_privateuse1_dispatch_ptr``);
  * for ``streams_events`` also the guard's stream and event methods when they live in ``guard.cpp``: the guard
    overrides whose declaration names a ``Stream``, an ``Event`` or an opaque ``void*`` event handle.
  Comments are ignored; the step's Python module is not read (its C++ is the interface).
- A step with no C++ implements what its Python module (``step.module_path``) registers with PyTorch:
  * every call to a PyTorch function (reached from ``torch`` or a name imported from it) whose name contains
    ``register``, or ``privateuse1`` unless it is a getter (``get_``/``is_``/``has_``); functions the module defines
    itself are not PyTorch's and do not count;
  * its dispatcher registrations, as in C++: ``lib.impl("op", ...)`` names the operator, ``lib.fallback(...)`` is
    ``fallback``;
  * the public methods of its classes that implement a PyTorch class: a class with a base imported from
    ``torch``, a class deriving from such a class, or a mixin among their bases;
  * when the module registers itself as the device module (it calls ``_register_device_module``), its
    top-level functions and classes that ``torch.cuda`` also has: the names PyTorch's device-generic code asks
    a device module for;
  * the entry-point groups of pyproject.toml whose entry points live in the module (e.g. ``torch.backends``).

A page names a method when a row of a markdown table in its section ``## The interface`` (the markdown cells from
that heading to the next level-2 heading) has it in a code span of its first column, e.g. ``| `exchangeDevice` |``
or ``| `c10::SetAllocator(kind, allocator)` |``: the name must stand as a whole identifier in the span (qualified
names and arguments are fine, ``set_`` is not named by ``set_.source_Tensor``). One row may name several methods;
a row that names one must fill at least four cells (method, what PyTorch calls it for, what breaks without it,
required or optional, contract rules).
"""
from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

import pytest
import torch

import torch_sim

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## The interface"
MIN_FILLED_CELLS = 4

_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_REGISTRATION_CALL = re.compile(
    r"^(?:Register\w*|register\w*|[Ss]et\w*Allocator|\w+Registrar|\w+Registry|set_privateuse1_dispatch_ptr)$")
_REGISTRATION_MACRO = re.compile(r"^\w*(?:REGISTER|TORCH_LIBRARY|PRIVATEUSE1|PRIVATEUSEONE)\w*$")
_STREAM_OR_EVENT = re.compile(r"Stream|Event|event|void\s*\*")
_GETTER = re.compile(r"^_*(?:get|is|has)_")


def _without_comments(code: str) -> str:
    return _COMMENT_OR_STRING.sub(lambda match: match.group(0) if match.group(0).startswith('"') else " ", code)


def _without_strings(code: str) -> str:
    return _COMMENT_OR_STRING.sub(lambda match: '""' if match.group(0).startswith('"') else " ", code)


def cpp_overrides(code: str) -> dict[str, str]:
    """Each method the C++ declares `override` or `final` (destructors aside) → its declaration, on one line."""
    code = _without_strings(_without_comments(code))
    found: dict[str, str] = {}
    for match in re.finditer(r"\b(?:override|final)\b", code):
        start = max(code.rfind(mark, 0, match.start()) for mark in ";{}") + 1
        declaration = " ".join(code[start:match.start()].split())
        name = re.search(r"(~?\w+)\s*\(", declaration)
        if name and not name.group(1).startswith("~"):
            found.setdefault(name.group(1), declaration)
    return found


def cpp_registrations(code: str) -> set[str]:
    """The registrations the C++ makes: operators it implements, fallbacks, registration functions and macros."""
    code = _without_comments(code)
    names = {op.split("::")[-1] for op in re.findall(r'\.impl\(\s*"([^"]+)"', code)}
    if re.search(r"\.fallback\(", code):
        names.add("fallback")
    code = _without_strings(code)
    names |= {name for name in re.findall(r"\b([A-Za-z_]\w*)\s*[(<>]", code) if _REGISTRATION_CALL.match(name)}
    names |= {name for name in re.findall(r"\b([A-Z][A-Z0-9_]*)\b", code) if _REGISTRATION_MACRO.match(name)}
    return names


def _torch_names(tree: ast.Module) -> set[str]:
    """The names the module imports from torch (at any depth), plus `torch` itself."""
    names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _base_name(base: ast.expr) -> str:
    while isinstance(base, ast.Attribute):
        base = base.value
    return base.id if isinstance(base, ast.Name) else ""


def python_interface(module_path: Path, module: str) -> set[str]:
    """What a step without C++ registers with PyTorch, by the rule in this file's docstring."""
    tree = ast.parse(module_path.read_text())
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    names: set[str] = set()
    registers_device_module = False
    torch_names = _torch_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        first = node.args[0] if node.args else None
        if name == "impl" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value.split("::")[-1])
        elif name == "fallback" and isinstance(func, ast.Attribute):
            names.add("fallback")
        elif name not in own and _base_name(func) in torch_names and (
                "register" in name.lower() or ("privateuse1" in name.lower() and not _GETTER.match(name))):
            names.add(name)
            registers_device_module |= name == "_register_device_module"
    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    implementing = {name for name, node in classes.items() if any(_base_name(b) in torch_names for b in node.bases)}
    while True:  # subclasses of implementing classes, and the mixins among their bases
        grown = set(implementing)
        for name, node in classes.items():
            bases = {_base_name(base) for base in node.bases}
            if bases & implementing:
                grown.add(name)
            if name in implementing:
                grown |= bases & classes.keys()
        if grown == implementing:
            break
        implementing = grown
    for name in implementing:
        names |= {item.name for item in classes[name].body
                  if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")}
    if registers_device_module:
        names |= {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                  and hasattr(torch.cuda, node.name)}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for group, entries in project.get("entry-points", {}).items():
        if any(value.split(":")[0] == module for value in entries.values()):
            names.add(group)
    return names


def interface_of(step) -> set[str]:
    """The methods and registrations sim implements for `step`, by the rule in this file's docstring."""
    if step.cpp_path is None:
        return python_interface(step.module_path, step.module)
    code = step.cpp_path.read_text()
    names = set(cpp_overrides(code)) | cpp_registrations(code)
    guard = step.cpp_path.parent / "guard.cpp"
    if step.name == "streams_events" and guard.is_file():
        names |= {name for name, declaration in cpp_overrides(guard.read_text()).items()
                  if _STREAM_OR_EVENT.search(declaration)}
    return names


def page_of(step) -> Path:
    return ROOT / "notebooks" / f"guide_{step.number:02d}_{step.name}.ipynb"


def interface_section(notebook: dict) -> str | None:
    """The markdown of the section `## The interface`, up to the next level-2 heading; None without one."""
    lines: list[str] | None = None
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            if lines is None:
                if re.match(rf"^{re.escape(SECTION)}\b", line):
                    lines = []
            elif re.match(r"^##\s", line):
                return "\n".join(lines)
            else:
                lines.append(line)
    return None if lines is None else "\n".join(lines)


def _cells(row: str) -> list[str]:
    row = row.strip().strip("|")
    cells, depth, current = [], False, []
    for char in row:  # a pipe inside a code span does not end a cell
        if char == "`":
            depth = not depth
        if char == "|" and not depth:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    cells.append("".join(current).strip())
    return cells


def table_rows(markdown: str) -> list[list[str]]:
    """The body rows of every markdown table in `markdown`, as lists of cells."""
    rows: list[list[str]] = []
    lines = markdown.splitlines()
    for index in range(1, len(lines)):
        if lines[index - 1].lstrip().startswith("|") and re.match(r"^\s*\|?\s*:?-{3,}", lines[index]):
            following = index + 1
            while following < len(lines) and lines[following].lstrip().startswith("|"):
                rows.append(_cells(lines[following]))
                following += 1
    return rows


def _names(name: str, span: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w.])", span) is not None


def missing_from_table(names: set[str], rows: list[list[str]]) -> tuple[list[str], list[str]]:
    """(names no row's first column names in a code span, names whose row leaves cells empty)."""
    missing, thin = [], []
    for name in sorted(names):
        naming = [row for row in rows if any(_names(name, span) for span in re.findall(r"`([^`]+)`", row[0]))]
        if not naming:
            missing.append(name)
        elif all(sum(1 for cell in row if cell) < MIN_FILLED_CELLS for row in naming):
            thin.append(name)
    return missing, thin


def test_the_rule_finds_what_sim_implements_for_its_core_steps():
    """The derivation itself: it must find the methods sim is known to override, and nothing from comments."""
    by_name = {step.name: step for step in torch_sim.GUIDE}
    guard = interface_of(by_name["guard"])
    assert {"exchangeDevice", "deviceCount", "uncheckedSetDevice", "DeviceGuardImplRegistrar"} <= guard
    assert "C10_REGISTER_GUARD_IMPL" not in guard  # named only in a comment
    streams = interface_of(by_name["streams_events"])
    assert {"getStreamFromGlobalPool", "record", "block", "elapsedTime", "recordDataPtrOnStream"} <= streams
    assert not {"exchangeDevice", "deviceCount", "getDeviceCapability"} & streams
    assert {"RegisterPrivateUse1HooksInterface", "getPinnedMemoryAllocator", "isPinnedPtr"} <= \
        interface_of(by_name["hooks"])
    assert {"empty.memory_format", "set_.source_Tensor", "set_", "fallback"} <= interface_of(by_name["operators"])
    assert {"_lazy_init", "device_count", "_register_device_module", "rename_privateuse1_backend"} <= \
        interface_of(by_name["device_module"])
    assert "export" not in interface_of(by_name["device_module"])


def test_every_step_has_an_interface_to_table():
    empty = [step.name for step in torch_sim.GUIDE if not interface_of(step)]
    assert not empty, f"the rule finds nothing sim implements for the steps {empty}"


def test_a_table_is_read_by_its_first_column_whole_names_and_filled_cells():
    section = interface_section({"cells": [
        {"cell_type": "markdown", "source": ["# Step\n", "## The interface\n", "| method | for | breaks | need |\n",
                                             "| --- | --- | --- | --- |\n",
                                             "| `set_.source_Tensor` | a | b | c |\n",
                                             "| `c10::SetAllocator(kind, a)` | a | b | required |\n",
                                             "| `record` / `block` |  |  | optional |\n", "## Later\n",
                                             "| `view` | a | b | c |\n", "| --- | --- | --- | --- |\n"]}]})
    assert section is not None and "Later" not in section
    missing, thin = missing_from_table({"set_", "SetAllocator", "record", "view"}, table_rows(section))
    assert missing == ["set_", "view"]
    assert thin == ["record"]
    assert interface_section({"cells": [{"cell_type": "markdown", "source": ["## Before and after\n"]}]}) is None


@pytest.mark.parametrize("step", torch_sim.GUIDE, ids=lambda step: step.name)
def test_the_guide_page_tables_every_method_sim_implements_for_its_step(step):
    page = page_of(step)
    assert page.is_file(), f"step {step.number} ({step.name}) has no guide page {page.relative_to(ROOT)}"
    section = interface_section(json.loads(page.read_text()))
    assert section is not None, f"{page.relative_to(ROOT)} has no markdown section '{SECTION}'"
    missing, thin = missing_from_table(interface_of(step), table_rows(section))
    assert not missing, (f"{page.relative_to(ROOT)}: the table in '{SECTION}' does not name these methods sim "
                         f"implements for step {step.number} ({step.name}): {', '.join(missing)}")
    assert not thin, (f"{page.relative_to(ROOT)}: the rows naming {', '.join(thin)} fill fewer than "
                      f"{MIN_FILLED_CELLS} cells")
