"""Every method a guide page tables is seen in the interface trace of the page's own call_path cells, or is marked
with the reason in guide_trace_gaps.toml; at most a third of a page's methods may be marked.

The methods of a page are the code spans in the first column of the table in its section ``## The interface``
(read as in test_guide_interface_tables.py), leaving out spans inside a parenthesised remark, such as
``(sim's kernel `silu_autograd_kernel`)`` or a row's list of the defaults sim inherits without overriding them. A
span names the last method it calls, or else itself without qualification: ``c10::SetAllocator(kind, allocator)``
is ``SetAllocator``, ``Registry::instance().add(f)`` is ``add``.

The traces: the code of every ``call_path("<code>", device=...)`` call in the page's code cells runs under sim's
interface trace (``torch.sim.start_interface_trace()`` / ``stop_interface_trace()``) in order, in one process per
page (guide_path_runner.py forks it from one that imported torch), after every sim device has started, as on a page
whose earlier cells used the device. The trace records sim's C++ interfaces, the device module's functions
(interface ``device_module``) and simccl's collectives and works (interface ``distributed``). A method is seen when
a trace records it:

- as a call of one of the interfaces the page's step owns (``TRACE_INTERFACES``; a step not listed there
  accepts every interface), by its method name or the last part of a dotted one (``session.start`` is ``start``);
- as an operator that began (``aten::empty`` is ``empty``): the trace records an operator's name without its
  overload, so any ``aten::set_`` sees ``set_.source_Tensor``;
- as a family of kernels (a function that registers operators from a table, see test_guide_interface_tables.py)
  when an operator the dispatcher says that function's libraries registered began;
- under its C++ name when sim's trace line names the public call PyTorch makes (``TRACE_ALIASES``).

The marks live beside this test, in guide_trace_gaps.toml: per page, entries of ``methods`` and ``why`` (the reason
no call on the page shows them). A marked method must be in the page's table and must not be seen in a trace (the
mark would be false). The file keeps the pages' text about the pages; the tool's own bookkeeping stays here.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import torch_sim
from tests.docs.test_guide_interface_tables import family_sites, interface_section, page_of, sim_kernels, table_rows

pytestmark = pytest.mark.xdist_group("guide-paths")  # one worker runs every page's call_path codes once

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("guide_path_runner.py")
GAPS = Path(__file__).with_name("guide_trace_gaps.toml")
MAX_MARKED_SHARE = Fraction(1, 3)  # of the methods a page's table names
# Pages whose table may mark more than MAX_MARKED_SHARE, with the reason no call_path cell can show more.
MARKED_SHARE_EXCEPTIONS: dict[str, str] = {
    "guide_11_autoload": "every method of its table runs inside `import torch` (the entry point group, its function, "
                         "the environment variable, the backend-name query), before any trace in that process can "
                         "start; the page's \"before and after\" runs them in fresh processes",
    "guide_02_hooks": "the hooks' device methods serve C++ code that holds the hooks; PyTorch's public Python reaches "
                      "the guard's instead, and only private `torch._C._accelerator_hooks_*` bindings reach them",
    "guide_14_distributed": "torch 2.13 deprecates the Python calls that reach five of its Work and Backend methods "
                            "(`all_reduce_coalesced`, `Work.is_success`, `Work.exception`, `Work.synchronize`, "
                            "`Work.result`): each "
                            "warns or logs a deprecation line, which a page must not show",
}
RUN_TIMEOUT_SECONDS = 600
# The trace interfaces whose calls count for a step's table (the names sim's SIM_TRACE lines and the device module's
# recorder give).
TRACE_INTERFACES: dict[str, tuple[str, ...]] = {
    "device_module": ("device_module",),
    "hooks": ("hooks",),
    "guard": ("guard",),
    "allocator": ("allocator", "cpu_allocator", "host_allocator"),
    "operators": ("operator", "structured_kernel", "autograd_node"),
    "streams_events": ("guard", "operator"),  # and the record_stream kernel it registers
    "generator": ("generator", "hooks"),
    "profiler": ("profiler",),
    "distributed": ("distributed",),
    # sim's classes for dynamo and inductor, which torch.sim's trace records (torch.sim's own functions share
    # their names, `is_available`, `synchronize`, so the device module's calls do not count)
    "compile": ("compile",),
}
# (interface, traced method) -> the table's name: GeneratorImpl's public clone() calls the clone_impl() a
# generator overrides, and sim's trace line names the public call.
TRACE_ALIASES: dict[tuple[str, str], str] = {("generator", "clone"): "clone_impl"}


def method_name(span: str) -> str:
    """The method a code span names: the last one it calls (`Registry::instance().add(f)` is `add`), else the span
    after its last `::` or `->` (`c10::SetAllocator` is `SetAllocator`, `set_.source_Tensor` stays whole)."""
    outer, depth = [], 0
    for char in span:  # the span with its argument lists emptied: `a(b(c)).d(e)` is `a().d()`
        depth += char == "("
        if depth == 0 or (depth == 1 and char == "("):
            outer.append(char)
        depth -= char == ")" and depth > 0
        if depth == 0 and char == ")":
            outer.append(char)
    called = re.findall(r"(\w+)\s*\(\)", "".join(outer))
    return called[-1] if called else re.split(r"::|->", span)[-1].strip()


def _without_remarks(cell: str) -> str:
    """The cell without its parenthesised remarks (parentheses inside code spans belong to the code)."""
    kept, depth, in_code = [], 0, False
    for char in cell:
        if char == "`" and depth == 0:
            in_code = not in_code
        elif not in_code and char == "(":
            depth += 1
            continue
        elif not in_code and char == ")" and depth > 0:
            depth -= 1
            continue
        if depth == 0:
            kept.append(char)
    return "".join(kept)


def table_methods(section: str) -> list[str]:
    """The methods the first column of the section's tables names, in order, each once."""
    found: list[str] = []
    for row in table_rows(section):
        for span in re.findall(r"`([^`]+)`", _without_remarks(row[0])):
            name = method_name(span)
            if re.match(r"[A-Za-z_]", name) and name not in found:  # not a bare signature such as `(store, rank)`
                found.append(name)
    return found


def read_gaps(text: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """({page: {method: why}} from the text of guide_trace_gaps.toml, problems with its entries)."""
    marks: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for page, entries in tomllib.loads(text).items():
        for entry in entries if isinstance(entries, list) else [entries]:
            methods, why = entry.get("methods"), entry.get("why")
            if not (isinstance(methods, list) and methods and all(isinstance(name, str) for name in methods)
                    and isinstance(why, str) and re.search(r"[A-Za-z]{2}", why) and set(entry) == {"methods", "why"}):
                problems.append(f"[[{page}]] {entry}: an entry is `methods = [\"name\", ...]` and `why = \"...\"`")
                continue
            marks.setdefault(page, {}).update({name: why for name in methods})
    return marks, problems


def call_path_codes(notebook: dict[str, Any]) -> list[tuple[str, str]]:
    """(code, device) of each call_path(...) call in the notebook's code cells, in order."""
    found = []
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "call_path(" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            func = getattr(node, "func", None)
            called = getattr(func, "id", None) or getattr(func, "attr", None)
            if not isinstance(node, ast.Call) or called != "call_path":
                continue
            arguments = {**dict(enumerate(node.args)), **{keyword.arg: keyword.value for keyword in node.keywords}}
            code, device = arguments.get("code", arguments.get(0)), arguments.get("device", arguments.get(1))
            if not (isinstance(code, ast.Constant) and isinstance(code.value, str)):
                raise ValueError(f"a call_path(...) call whose code is not a string literal: {ast.unparse(node)}")
            found.append((code.value, device.value if isinstance(device, ast.Constant) else "sim"))
    return found


def seen_names(step: str, traces: list[dict[str, Any]], families: dict[str, set[str]] | None = None) -> set[str]:
    """The names the traces show for the step's table, by the rules in this file's docstring; `families` maps each
    family of kernels the step registers to its operators (`aten::add.Tensor`)."""
    interfaces = TRACE_INTERFACES.get(step)
    seen: set[str] = set()
    began: set[str] = set()
    for trace in traces:
        for interface, method in trace["calls"]:
            if interface == "operator":
                began.add(method)
            if interfaces is not None and interface not in interfaces:
                continue
            name = method.split("::")[-1] if interface == "operator" else method
            seen |= {name, name.split(".")[-1]}
            if (interface, method) in TRACE_ALIASES:
                seen.add(TRACE_ALIASES[interface, method])
    seen |= {family for family, operators in (families or {}).items()
             if {operator.split(".")[0] for operator in operators} & began}
    return seen


def is_seen(method: str, seen: set[str]) -> bool:
    """Whether the method, or its operator (`empty` of `empty.memory_format`), or its last part, was seen."""
    return bool({method, method.split(".")[0], method.split(".")[-1]} & seen)


def page_problems(step: str, section: str, traces: list[dict[str, Any]], marks: dict[str, str],
                  families: dict[str, set[str]] | None = None) -> list[str]:
    """What is wrong with a page's section '## The interface' against its traces and its marks (method -> why), as
    sentences saying what to do."""
    methods = table_methods(section)
    seen = seen_names(step, traces, families)
    problems = [f"`{method}` is marked in {GAPS.name}, but the table does not name it: fix the name or drop the mark"
                for method in marks if method not in methods]
    problems += [f"`{method}` is marked in {GAPS.name} as not in the traces, yet a trace shows it: drop the mark"
                 for method in marks if method in methods and is_seen(method, seen)]
    unseen = [method for method in methods if method not in marks and not is_seen(method, seen)]
    if unseen:
        problems.append(f"these methods of its table appear in no trace of its call_path cells: "
                        f"{', '.join(f'`{method}`' for method in unseen)}. For each, add a call_path cell whose code "
                        f"reaches it, or mark it with the reason no call on the page shows it in {GAPS.name}")
    return problems


def too_many_marked(methods: list[str], marks: dict[str, str]) -> str | None:
    """Why a page marks too many of its table's methods, None when it marks at most MAX_MARKED_SHARE of them."""
    marked = [method for method in methods if method in marks]
    if methods and Fraction(len(marked), len(methods)) > MAX_MARKED_SHARE:
        return (f"{len(marked)} of the {len(methods)} methods its table names are marked, more than "
                f"{MAX_MARKED_SHARE} of them: add call_path cells that show what the page teaches")
    return None


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each page's call_path codes run under the interface trace: {page: [trace, ...]} or {page: "why not"}."""
    codes: dict[str, Any] = {}
    for step in torch_sim.GUIDE:
        page = page_of(step)
        try:
            codes[page.stem] = call_path_codes(json.loads(page.read_text()))
        except (OSError, ValueError, SyntaxError) as error:
            codes[page.stem] = f"cannot read its call_path cells: {error}"
    folder = tmp_path_factory.mktemp("guide_paths")
    source, target = folder / "codes.json", folder / "traces.json"
    source.write_text(json.dumps([[page, found] for page, found in codes.items() if isinstance(found, list)]))
    run = subprocess.run([sys.executable, str(RUNNER), str(source), str(target)], cwd=ROOT, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT_SECONDS)
    assert run.returncode == 0, f"the runner of the pages' call_path codes failed:\n{run.stderr[-3000:]}"
    results = json.loads(target.read_text())
    return {page: results.get(page, found) if isinstance(found, list) else found for page, found in codes.items()}


def test_the_rules_read_tables_marks_and_traces():
    """The reading itself: remarks left out, marks read with their reasons, overloads, aliases and families seen."""
    section = "\n".join([
        "| method | for | breaks | need | contract |", "| --- | --- | --- | --- | --- |",
        "| `c10::SetAllocator(kind, a)` / `Registry::instance().add(f(x))` | a | b | c | d |",
        "| `silu` (sim's kernel `silu_autograd_kernel`) | a | b | c | d |",
        "| `set_.source_Tensor` / `clone_impl` | a | b | c | d |",
        "| (defaults sim inherits: `getError`, `suspend`) | a | b | c | d |", "", "Later."])
    assert table_methods(section) == ["SetAllocator", "add", "silu", "set_.source_Tensor", "clone_impl"]
    marks, problems = read_gaps('[[guide_04_allocator]]\nmethods = ["SetAllocator"]\nwhy = "registered at load."\n'
                                '[[guide_04_allocator]]\nmethods = ["silu"]\n')
    assert marks == {"guide_04_allocator": {"SetAllocator": "registered at load."}}
    assert len(problems) == 1 and "silu" in problems[0]
    seen = seen_names("generator", [{"calls": [["generator", "clone"], ["guard", "record"], ["operator", "x"]]}])
    assert is_seen("clone_impl", seen) and not is_seen("record", seen) and not is_seen("x", seen)
    operators = seen_names("operators", [{"calls": [["operator", "aten::set_"], ["guard", "setDevice"]]}],
                           {"install_direct_kernels": {"aten::add.Tensor"}, "install_native_kernels": {"aten::gelu"}})
    assert is_seen("set_.source_Tensor", operators) and not is_seen("setDevice", operators)
    assert not is_seen("install_direct_kernels", operators)
    added = seen_names("operators", [{"calls": [["operator", "aten::add"]]}],
                       {"install_direct_kernels": {"aten::add.Tensor"}})
    assert is_seen("install_direct_kernels", added)
    table = "| method | a | b | c | d |\n| --- | --- | --- | --- | --- |\n| `getStream` | a | b | c | d |\n" \
            "| `block` | a | b | c | d |\n| `record` | a | b | c | d |\n\n"
    guard_traces = [{"calls": [["guard", "getStream"], ["guard", "record"]]}]
    assert page_problems("guard", table, guard_traces, {"block": "no call here makes a stream wait."}) == []
    wrong = page_problems("guard", table, guard_traces, {"record": "no call records.", "query": "no call records."})
    assert len(wrong) == 3 and "`query` is marked in" in wrong[0] and "`record` is marked in" in wrong[1]
    assert "`block`" in wrong[2] and "add a call_path cell" in wrong[2]
    methods = table_methods(table)
    assert too_many_marked(methods, {"block": "no wait here."}) is None
    assert too_many_marked(methods, {"block": "no wait here.", "record": "no event here."}) == (
        "2 of the 3 methods its table names are marked, more than 1/3 of them: add call_path cells that show what "
        "the page teaches")
    notebook = {"cells": [{"cell_type": "code", "source": ["from pu1_explorer.widgets import call_path\n",
                                                          "call_path(\"torch.ones(1)\", device=\"sim:1\")\n"]}]}
    assert call_path_codes(notebook) == [("torch.ones(1)", "sim:1")]


def test_the_marks_file_is_well_formed_and_names_guide_pages():
    marks, problems = read_gaps(GAPS.read_text())
    assert not problems, f"{GAPS.name}:\n  " + "\n  ".join(problems)
    pages = {page_of(step).stem for step in torch_sim.GUIDE}
    assert set(marks) <= pages, f"{GAPS.name} marks pages that are not the guide's: {sorted(set(marks) - pages)}"


def test_the_pages_leave_the_marks_to_the_data_file():
    said = [page_of(step).name for step in torch_sim.GUIDE
            if "Not in the traces on this page" in (interface_section(json.loads(page_of(step).read_text())) or "")]
    assert not said, f"these pages list their trace gaps in their text; move the list to {GAPS.name}: {said}"


@pytest.fixture(scope="module")
def kernels_by_site() -> dict[tuple[str, int], set[str]]:
    return sim_kernels()


@pytest.mark.parametrize("step", torch_sim.GUIDE, ids=lambda step: page_of(step).stem)
def test_every_method_the_page_tables_is_in_its_traces_or_marked(step, traces, kernels_by_site):
    page = page_of(step)
    name = page.relative_to(ROOT)
    found = traces[page.stem]
    assert isinstance(found, list), f"{name}: {found}"
    assert found, f"{name} has no call_path(\"<code>\", device=\"sim\") cell: end the page with the path of its step"
    failed = [f"  {trace['code']!r} raised {trace['error']}" for trace in found if trace["error"]]
    assert not failed, f"{name}: the code of its call_path cells must run; these raised:\n" + "\n".join(failed)
    section = interface_section(json.loads(page.read_text()))
    assert section is not None, f"{name} has no markdown section '## The interface'"
    marks, _ = read_gaps(GAPS.read_text())
    families = {family: set().union(*(kernels_by_site.get(site, set()) for site in sites))
                for family, sites in family_sites(step).items()}
    problems = page_problems(step.name, section, found, marks.get(page.stem, {}), families)
    traced = sorted({f"{interface}.{method}" for trace in found for interface, method in trace["calls"]
                     if interface != "operator"})
    assert not problems, (f"{name}:\n  " + "\n  ".join(problems) +
                          f"\n(the traces on the page show: {', '.join(traced) or 'no interface call'})")


@pytest.mark.parametrize("step", torch_sim.GUIDE, ids=lambda step: page_of(step).stem)
def test_a_page_marks_at_most_a_third_of_its_table(step):
    page = page_of(step)
    section = interface_section(json.loads(page.read_text()))
    assert section is not None, f"{page.name} has no markdown section '## The interface'"
    marks, _ = read_gaps(GAPS.read_text())
    problem = too_many_marked(table_methods(section), marks.get(page.stem, {}))
    if page.stem in MARKED_SHARE_EXCEPTIONS:  # the exception must still be needed
        assert problem is not None, (f"{page.relative_to(ROOT)} marks at most {MAX_MARKED_SHARE} of its table: drop "
                                     f"it from MARKED_SHARE_EXCEPTIONS")
        return
    assert problem is None, f"{page.relative_to(ROOT)}: {problem} (marks: {GAPS.name})"
