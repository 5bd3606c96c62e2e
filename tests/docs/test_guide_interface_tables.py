"""Every guide page tables the whole interface sim implements for its step, derived from sim's own sources.

What a step implements is read from the code, so a method sim adds and a page forgets fails here:

- A step with C++ (``step.cpp``) implements what its files hold, every one of them (``operators_direct.cpp`` as
  much as ``operators.cpp``):
  * every method they declare ``override`` or ``final`` (destructors aside), whatever class it belongs to;
  * every registration call: a dispatcher registration (``m.impl("op")`` names the operator, ``m.fallback(...)``
    is ``fallback``), a registration function or macro (``Register*``/``register*`` calls, ``*REGISTER*``,
    ``TORCH_LIBRARY*``, ``*PRIVATEUSE1*``/``*PRIVATEUSEONE*`` macros, ``Set*Allocator``/``set*Allocator``,
    ``*Registrar``/``*Registry`` objects, ``set_privateuse1_dispatch_ptr``);
  * for ``streams_events`` also the guard's stream and event methods when they live in ``guard.cpp``: the guard
    overrides whose declaration names a ``Stream``, an ``Event`` or an opaque ``void*`` event handle.
  Comments are ignored. Of the step's Python module only its dispatcher registrations are read
  (``torch.library``, as below); the rest of its interface is its C++.
- A family of kernels: operators registered from a table rather than one by one, by a registration macro that
  expands over a list (``KERNEL_PRIVATEUSEONE`` in ``AT_FORALL_FP32(...)``: the family of the libraries its
  function opens, named by the macro), by a loop
  (``m.impl(name.c_str(), ...)``, ``lib.impl(name, ...)`` with names handed in) or by a helper called once per
  operator with the library and the operator's name (``functional<...>(m, "add.Tensor")``), are named by the
  function that registers them (``install_direct_kernels``): one row naming that function tables the family. A
  helper that takes the library as a parameter registers for its callers and is not a family of its own.
- A step with no C++ implements what its Python module (``step.module_path``) registers with PyTorch:
  * every call to a PyTorch function (reached from ``torch`` or a name imported from it) whose name contains
    ``register``, or ``privateuse1`` unless it is a getter (``get_``/``is_``/``has_``); functions the module defines
    itself are not PyTorch's and do not count;
  * its dispatcher registrations, as in C++: ``lib.impl("op", ...)`` names the operator, ``lib.fallback(...)`` is
    ``fallback``, a loop's ``lib.impl(name, ...)`` is the family of the function it runs in;
  * the public methods of its classes that implement a PyTorch class: a class with a base imported from
    ``torch``, a class deriving from such a class, or a mixin among their bases;
  * when the module registers itself as the device module (it calls ``_register_device_module``), its
    top-level functions and classes that ``torch.cuda`` also has: the names PyTorch's device-generic code asks
    a device module for;
  * the entry-point groups of pyproject.toml whose entry points live in the module (e.g. ``torch.backends``).

Every kernel sim holds on its dispatch keys comes from a registration site this rule reads (a ``new_library``
or ``TORCH_LIBRARY_IMPL`` of a step's C++ file, a ``torch.library.Library`` of a step's module): the dispatcher says
where each was registered, so a kernel registered in a way the rule does not read fails
``test_every_kernel_sim_holds_comes_from_a_site_the_rule_reads``.

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
CSRC = ROOT / "backend" / "torch_sim" / "csrc"
SECTION = "## The interface"
MIN_FILLED_CELLS = 4

_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_REGISTRATION_CALL = re.compile(
    r"^(?:Register(?!ed$)\w*|register\w*|[Ss]et\w*Allocator|\w+Registrar|\w+Registry|set_privateuse1_dispatch_ptr)$")
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
    """The registrations the C++ makes: operators it implements, fallbacks, registration functions and macros, and
    the families of kernels it registers from tables (named by their function)."""
    stripped = _without_comments(code)
    names = {op.split("::")[-1] for op in re.findall(r'\.impl\(\s*"([^"]+)"', stripped)}
    if re.search(r"\.fallback\(", stripped):
        names.add("fallback")
    names |= set(cpp_families(code))
    stripped = _without_strings(stripped)
    names |= {name for name in re.findall(r"\b([A-Za-z_]\w*)\s*[(<>]", stripped) if _REGISTRATION_CALL.match(name)}
    names |= {name for name in re.findall(r"\b([A-Z][A-Z0-9_]*)\b", stripped) if _REGISTRATION_MACRO.match(name)}
    return names


def _blanked(code: str, strings: bool) -> str:
    """The code with comments (and, if `strings`, the insides of string literals) blanked, lengths and lines kept."""
    def blank(match: re.Match) -> str:
        text = match.group(0)
        if text.startswith('"'):
            return '"' + re.sub(r"[^\n]", " ", text[1:-1]) + '"' if strings else text
        return re.sub(r"[^\n]", " ", text)
    return _COMMENT_OR_STRING.sub(blank, code)


def cpp_functions(code: str) -> list[tuple[str, int, int, str]]:
    """(name, start, end, parameters) of each outermost function body of the C++ (namespaces and classes opened)."""
    blank = _blanked(code, strings=True)
    found, stack, boundary = [], [], 0
    for index, char in enumerate(blank):
        if char == "{":
            opener = re.sub(r"^\s*#.*$", "", blank[boundary:index], flags=re.MULTILINE)  # no preprocessor lines
            if re.match(r"\s*(?:inline\s+)?namespace\b", opener) or (
                    re.search(r"\b(?:class|struct|union|enum)\b", opener) and "(" not in opener.split(":")[0]):
                stack.append(None)
            else:
                name = re.search(r"(\w+)\s*\(", opener)
                outermost = not any(entry for entry in stack)
                stack.append((name.group(1) if name and outermost else "", index, opener) if outermost else "inner")
            boundary = index + 1
        elif char == "}":
            entry = stack.pop() if stack else None
            if isinstance(entry, tuple) and entry[0]:
                found.append((entry[0], entry[1], index, entry[2]))
            boundary = index + 1
        elif char == ";":
            boundary = index + 1
    return found


def _library_names(code: str) -> set[str]:
    return set(re.findall(r"(\w+)\s*=\s*new_library\(", code)) | set(re.findall(r"torch::Library\s*&\s*(\w+)", code))


def cpp_families(code: str) -> dict[str, list[int]]:
    """The families of kernels the C++ registers from tables: function -> the lines of its library sites."""
    blank = _blanked(code, strings=False)
    libraries = _library_names(blank)
    families: dict[str, list[int]] = {}
    for name, start, end, parameters in cpp_functions(code):
        body = blank[start:end]
        if re.search(r"torch::Library\s*&", parameters):
            continue  # a helper: its callers name the operators
        loop = any(library in libraries for library in re.findall(r"\b(\w+)\s*\.impl\(\s*[^\s\"]", body))
        helper = any(library in libraries for library in re.findall(r'\(\s*(\w+)\s*,\s*"[^"]+"\s*\)', body))
        sites = [code.count("\n", 0, start + match.start()) + 1
                 for match in re.finditer(r"\b(?:__LINE__|TORCH_LIBRARY_IMPL\b)", body)]
        if loop or helper:
            families[name] = sites
        if sites:  # a registration macro a function expands over its libraries: the family of those libraries
            for macro in set(re.findall(r"\b([A-Z][A-Z0-9_]*)\b", _blanked(body, strings=True))):
                if _REGISTRATION_MACRO.match(macro) and not macro.startswith("TORCH_LIBRARY"):
                    families.setdefault(macro, []).extend(sites)
    return families


def cpp_sites(code: str) -> set[int]:
    """The lines where the C++ opens a library of kernels (`new_library(..., __FILE__, __LINE__)`, TORCH_LIBRARY*)."""
    blank = _blanked(code, strings=False)
    return {blank.count("\n", 0, match.start()) + 1
            for match in re.finditer(r"\b(?:__LINE__|TORCH_LIBRARY\w*)\b", blank)}


def python_sites(tree: ast.Module) -> set[int]:
    """The lines where Python opens a `torch.library.Library` (the dispatcher records the caller's line)."""
    return {node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "Library"}


def python_registrations(tree: ast.Module) -> set[str]:
    """The dispatcher registrations of a Python module: `lib.impl("op")` names, `fallback`, and each function that
    registers a family (`lib.impl(name, ...)` with a name handed in)."""
    names: set[str] = set()
    for function in [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
        nodes = ast.walk(function) if function is not tree else (
            node for statement in tree.body if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(statement))
        for node in nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            first = node.args[0] if node.args else None
            if node.func.attr == "impl" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value.split("::")[-1])
            elif node.func.attr == "impl" and first is not None and function is not tree:
                names.add(function.name)
            elif node.func.attr == "fallback":
                names.add("fallback")
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
    names: set[str] = python_registrations(tree)
    registers_device_module = False
    torch_names = _torch_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("impl", "fallback") and isinstance(func, ast.Attribute):
            continue  # dispatcher registrations: python_registrations
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
    if not step.cpp:
        return python_interface(step.module_path, step.module)
    names = python_registrations(ast.parse(step.module_path.read_text()))
    for path in step.cpp_paths:
        code = path.read_text()
        names |= set(cpp_overrides(code)) | cpp_registrations(code)
    guard = CSRC / "guard.cpp"
    if step.name == "streams_events" and "guard.cpp" not in step.cpp:
        names |= {name for name, declaration in cpp_overrides(guard.read_text()).items()
                  if _STREAM_OR_EVENT.search(declaration)}
    return names


def registration_sites() -> dict[str, set[int]]:
    """Every file of a step (by name) -> the lines where it opens a library of kernels, as the rule reads them."""
    sites: dict[str, set[int]] = {}
    for step in torch_sim.GUIDE:
        sites[step.module_path.name] = python_sites(ast.parse(step.module_path.read_text()))
        for path in step.cpp_paths:
            sites[path.name] = cpp_sites(path.read_text())
    return sites


def family_sites(step) -> dict[str, set[tuple[str, int]]]:
    """Each family of kernels the step registers from a table -> its library sites, (file name, line)."""
    families: dict[str, set[tuple[str, int]]] = {}
    for path in step.cpp_paths:
        for name, lines in cpp_families(path.read_text()).items():
            families.setdefault(name, set()).update((path.name, line) for line in lines)
    tree = ast.parse(step.module_path.read_text())
    family_names = python_registrations(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in family_names:
            families.setdefault(node.name, set()).update(
                (step.module_path.name, line) for line in python_sites(node))  # type: ignore[arg-type]
    return families


SIM_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1", "SparsePrivateUse1",
            "SparseCsrPrivateUse1", "QuantizedPrivateUse1", "NestedTensorPrivateUse1")
_REGISTERED = re.compile(r"^(\w+): .*registered at (.+?):(\d+)", re.MULTILINE)


def sim_kernels() -> dict[tuple[str, int], set[str]]:
    """(file name, line) of each registration site -> the operators (`aten::add.Tensor`) whose kernel on one of sim's
    dispatch keys the dispatcher says was registered there; sites outside sim's package left out."""
    package = str(Path(torch_sim.__file__).resolve().parent)
    found: dict[tuple[str, int], set[str]] = {}
    for operator in torch._C._dispatch_get_all_op_names():
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(operator, key) for key in SIM_KEYS):
            continue
        for key, file, line in _REGISTERED.findall(torch._C._dispatch_dump(operator)):
            if key in SIM_KEYS and str(Path(file).resolve()).startswith(package):
                found.setdefault((Path(file).name, int(line)), set()).add(operator)
    return found


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


def table_cells(row: str) -> list[str]:
    """The cells of a markdown table row; a pipe inside a code span does not end a cell."""
    row = row.strip().strip("|")
    cells, depth, current = [], False, []
    for char in row:
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
                rows.append(table_cells(lines[following]))
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
    operators = interface_of(by_name["operators"])
    assert {"empty.memory_format", "set_.source_Tensor", "set_", "fallback"} <= operators
    # every file of the step, and every way it registers: tables of operators are families named by their function
    assert {"install_direct_kernels", "install_native_kernels", "install_recurrent_kernels",
            "install_routed_operators", "_has_compatible_shallow_copy_type", "maybe_get_output"} <= operators
    assert not {"install", "functional", "add.Tensor"} & operators  # a helper, and a family's member
    assert {"capture_begin", "replay", "REGISTER_GRAPH_IMPL"} & interface_of(by_name["graphs"])
    assert {"_lazy_init", "device_count", "_register_device_module", "rename_privateuse1_backend"} <= \
        interface_of(by_name["device_module"])
    assert "export" not in interface_of(by_name["device_module"])


def test_a_family_is_the_function_that_registers_from_a_table():
    code = """
    namespace sim {
    template <class Kernel> void functional(torch::Library& m, const char* name) { m.impl(name, TORCH_FN(Kernel::f)); }
    void install_table() {
      auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
      functional<Add>(m, "add.Tensor");
    }
    static void install_loop(const std::vector<std::string>& names) {
      auto& m =
          new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
      for (const auto& name : names) m.impl(name.c_str(), torch::CppFunction::makeFallthrough());
    }
    struct Kernel final : Base { void set_output(int) override {} };
    void install_one() { new_library(kind, "aten", key, __FILE__, __LINE__).impl("view", TORCH_FN(view)); }
    }  // namespace sim
    """
    assert cpp_families(code) == {"install_table": [5], "install_loop": [10]}  # the line of __LINE__
    amp = ("void install() {\n  auto& m = new_library(kind, ns, key, __FILE__, __LINE__);\n"
           "  AT_FORALL(KERNEL_PRIVATEUSEONE)\n}\n")
    assert cpp_families(amp) == {"KERNEL_PRIVATEUSEONE": [2]}
    assert cpp_sites(code) == {5, 10, 14}
    assert cpp_registrations(code) >= {"install_table", "install_loop", "view"}
    assert not {"functional", "install_one", "add.Tensor"} & cpp_registrations(code)
    tree = ast.parse("import torch\n_lib = None\ndef install():\n    lib = torch.library.Library('aten', 'IMPL')\n"
                     "    for name in NAMES:\n        lib.impl(name, kernel, 'PrivateUse1')\n"
                     "    lib.impl('relu', kernel, 'PrivateUse1')\n")
    assert python_registrations(tree) == {"install", "relu"} and python_sites(tree) == {4}


def test_every_kernel_sim_holds_comes_from_a_site_the_rule_reads():
    """The dispatcher's word on where each of sim's kernels was registered: no registration hides from the rule."""
    read = registration_sites()
    held = sim_kernels()
    assert held, "the dispatcher holds no kernel registered by sim: is sim loaded?"
    unread = sorted(f"{file}:{line} ({', '.join(sorted(operators)[:3])})" for (file, line), operators in held.items()
                    if line not in read.get(file, set()))
    assert not unread, ("kernels registered at sites the rule does not read (a file of no step, a way of "
                        f"registering it does not know, or a torch_sim._C older than its sources: rebuild): {unread}")


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
