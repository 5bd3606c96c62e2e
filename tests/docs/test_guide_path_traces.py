"""Every method a guide page tables is seen in the interface trace of the page's own call_path cells, or the page
says why not.

The methods of a page are the code spans in the first column of the table in its section ``## The interface``
(read as in test_guide_interface_tables.py), leaving out spans inside a parenthesised remark, such as
``(sim's kernel `silu_autograd_kernel`)``. A span names the last method it calls, or else itself without
qualification: ``c10::SetAllocator(kind, allocator)`` is ``SetAllocator``, ``Registry::instance().add(f)`` is ``add``.

The traces: the code of every ``call_path("<code>", device=...)`` call in the page's code cells runs under sim's
interface trace (``torch.sim.start_interface_trace()`` / ``stop_interface_trace()``) in order, in one process per
page (guide_path_runner.py forks it from one that imported torch), after every sim device has started, as on a page
whose earlier cells used the device. A method is seen when a trace records it:

- as a call of one of the interfaces the page's step owns (``TRACE_INTERFACES``; a step not listed there
  accepts every interface), by its method name or the last part of a dotted one (``session.start`` is ``start``);
- as an operator that began (``aten::empty`` is ``empty``): the trace records an operator's name without its
  overload, so any ``aten::set_`` sees ``set_.source_Tensor``;
- under its C++ name when sim's trace line names the public call PyTorch makes (``TRACE_ALIASES``).

The mark, for a method no call on the page shows: in the section ``## The interface``, a line that starts with
``Not in the traces on this page:``, then a markdown list, each item the methods in code spans, a colon, and
the reason, e.g.::

    Not in the traces on this page:

    - `RegisterPrivateUse1HooksInterface`: sim registers it once, when it loads, before any trace can start.
    - `init`: sim does not override it; PyTorch's default, which does nothing, answers.

A marked method must be in the table and must not be seen in a trace (the mark would be false).
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import torch_sim
from tests.docs.test_guide_interface_tables import interface_section, page_of, table_rows

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("guide_path_runner.py")
MARK = "Not in the traces on this page:"
RUN_TIMEOUT_SECONDS = 600
# The trace interfaces whose calls count for a step's table (the names sim's SIM_TRACE lines give).
# The device module's functions are Python, which the trace does not record: nothing counts for step 1.
TRACE_INTERFACES: dict[str, tuple[str, ...]] = {
    "device_module": (),
    "hooks": ("hooks",),
    "guard": ("guard",),
    "allocator": ("allocator", "cpu_allocator", "host_allocator"),
    "operators": ("operator",),
    "streams_events": ("guard", "operator"),  # and the record_stream kernel it registers
    "generator": ("generator", "hooks"),
    "profiler": ("profiler",),
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


def marked_methods(section: str) -> tuple[dict[str, str], list[str]]:
    """(method -> reason from the list after MARK, problems with that list)."""
    lines = section.splitlines()
    start = next((index for index, line in enumerate(lines) if line.strip().startswith(MARK)), None)
    if start is None:
        return {}, []
    items: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith((" ", "\t")) and line.strip():
            items[-1] += " " + line.strip()
        elif line.strip() or items:
            break
    marks: dict[str, str] = {}
    problems = [] if items else [f"the line '{MARK}' is not followed by a list (a blank line, then '- `method`: why')"]
    for item in items:
        head, colon, reason = _split_at_colon(item)
        names = [method_name(span) for span in re.findall(r"`([^`]+)`", head)]
        if not colon or not names or not re.search(r"[A-Za-z]{2}", reason):
            problems.append(f"the item '- {item}' is not 'methods in code spans: why no call on the page shows them'")
            continue
        marks.update({name: reason.strip() for name in names})
    return marks, problems


def _split_at_colon(text: str) -> tuple[str, str, str]:
    in_code = False
    for index, char in enumerate(text):
        if char == "`":
            in_code = not in_code
        elif char == ":" and not in_code:
            return text[:index], ":", text[index + 1:]
    return text, "", ""


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


def seen_names(step: str, traces: list[dict[str, Any]]) -> set[str]:
    """The names the traces show for the step's table, by the rules in this file's docstring."""
    interfaces = TRACE_INTERFACES.get(step)
    seen: set[str] = set()
    for trace in traces:
        for interface, method in trace["calls"]:
            if interfaces is not None and interface not in interfaces:
                continue
            name = method.split("::")[-1] if interface == "operator" else method
            seen |= {name, name.split(".")[-1]}
            if (interface, method) in TRACE_ALIASES:
                seen.add(TRACE_ALIASES[interface, method])
    return seen


def is_seen(method: str, seen: set[str]) -> bool:
    """Whether the method, or its operator (`empty` of `empty.memory_format`), or its last part, was seen."""
    return bool({method, method.split(".")[0], method.split(".")[-1]} & seen)


def page_problems(step: str, section: str, traces: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a page's section '## The interface' against its traces, as sentences saying what to do."""
    methods = table_methods(section)
    marks, problems = marked_methods(section)
    seen = seen_names(step, traces)
    problems += [f"`{method}` is marked, but the table does not name it: fix the name or drop the mark"
                 for method in marks if method not in methods]
    problems += [f"`{method}` is marked as not in the traces, yet a trace shows it: drop the mark"
                 for method in marks if method in methods and is_seen(method, seen)]
    unseen = [method for method in methods if method not in marks and not is_seen(method, seen)]
    if unseen:
        problems.append(f"these methods of its table appear in no trace of its call_path cells: "
                        f"{', '.join(f'`{method}`' for method in unseen)}. For each, add a call_path cell whose code "
                        f"reaches it, or an item '- `{unseen[0]}`: why no call on the page shows it' to the list "
                        f"after the line '{MARK}' in '## The interface'")
    return problems


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
    """The reading itself: remarks left out, marks parsed with their reasons, overloads and aliases seen."""
    section = "\n".join([
        "| method | for | breaks | need | contract |", "| --- | --- | --- | --- | --- |",
        "| `c10::SetAllocator(kind, a)` / `Registry::instance().add(f(x))` | a | b | c | d |",
        "| `silu` (sim's kernel `silu_autograd_kernel`) | a | b | c | d |",
        "| `set_.source_Tensor` / `clone_impl` | a | b | c | d |", "",
        MARK, "", "- `SetAllocator`: registered once, when sim loads.", "- `silu` and no reason", "", "Later."])
    assert table_methods(section) == ["SetAllocator", "add", "silu", "set_.source_Tensor", "clone_impl"]
    marks, problems = marked_methods(section)
    assert marks == {"SetAllocator": "registered once, when sim loads."}
    assert len(problems) == 1 and "silu" in problems[0]
    seen = seen_names("generator", [{"calls": [["generator", "clone"], ["guard", "record"], ["operator", "x"]]}])
    assert is_seen("clone_impl", seen) and not is_seen("record", seen) and not is_seen("x", seen)
    operators = seen_names("operators", [{"calls": [["operator", "aten::set_"], ["guard", "setDevice"]]}])
    assert is_seen("set_.source_Tensor", operators) and not is_seen("setDevice", operators)
    table = "| method | a | b | c | d |\n| --- | --- | --- | --- | --- |\n| `getStream` | a | b | c | d |\n" \
            "| `block` | a | b | c | d |\n| `record` | a | b | c | d |\n\n"
    guard_traces = [{"calls": [["guard", "getStream"], ["guard", "record"]]}]
    assert page_problems("guard", table + f"{MARK}\n\n- `block`: no call here makes a stream wait.\n",
                         guard_traces) == []
    wrong = page_problems("guard", table + f"{MARK}\n\n- `record`, `query`: no call here records.\n", guard_traces)
    assert len(wrong) == 3 and "`query` is marked, but" in wrong[0] and "`record` is marked as not" in wrong[1]
    assert "`block`" in wrong[2] and "add a call_path cell" in wrong[2]
    notebook = {"cells": [{"cell_type": "code", "source": ["from pu1_explorer.widgets import call_path\n",
                                                          "call_path(\"torch.ones(1)\", device=\"sim:1\")\n"]}]}
    assert call_path_codes(notebook) == [("torch.ones(1)", "sim:1")]


@pytest.mark.parametrize("step", torch_sim.GUIDE, ids=lambda step: page_of(step).stem)
def test_every_method_the_page_tables_is_in_its_traces_or_marked(step, traces):
    page = page_of(step)
    name = page.relative_to(ROOT)
    found = traces[page.stem]
    assert isinstance(found, list), f"{name}: {found}"
    assert found, f"{name} has no call_path(\"<code>\", device=\"sim\") cell: end the page with the path of its step"
    failed = [f"  {trace['code']!r} raised {trace['error']}" for trace in found if trace["error"]]
    assert not failed, f"{name}: the code of its call_path cells must run; these raised:\n" + "\n".join(failed)
    section = interface_section(json.loads(page.read_text()))
    assert section is not None, f"{name} has no markdown section '## The interface'"
    problems = page_problems(step.name, section, found)
    traced = sorted({f"{interface}.{method}" for trace in found for interface, method in trace["calls"]
                     if interface != "operator"})
    assert not problems, (f"{name}:\n  " + "\n  ".join(problems) +
                          f"\n(the traces on the page show: {', '.join(traced) or 'no interface call'})")
