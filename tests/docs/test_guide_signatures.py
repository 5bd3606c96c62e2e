"""The C++ methods the guide's interface tables name have the parameter types torch 2.13's installed headers declare.

Which class a row belongs to: the C++ classes named in code spans of the table's caption (the paragraph right before
the table, e.g. "**The graph, `at::GraphImplInterface`** …") and of the row's first cell (e.g. "`isStreamCapturing(…)`
(`DeviceGuardImplInterface`)"). A name counts as a class when the installed headers (torch/include) define a class or
struct of that name; a qualified name (`c10d::Backend`) picks the definition whose file opens its namespaces. A
method is looked up in those classes in order, and in their bases.

Each code span of a row's first cell whose name (the identifier before its parenthesis) is a method of one of its
classes must give the signature, `name(types)`, e.g. `emptyCache(MempoolId_t)` or
`record(void**, const Stream&, DeviceIndex, EventFlag)`; a method with no parameters is `name()`. The page's types
must equal those of one of the header's declarations of that name in the class, after both are normalised:
comments, default arguments, `const`/`volatile`, references (`&`, `&&`), attributes, `struct`/`class`/`typename` and
every namespace or class qualification (`c10::`, `at::`, `std::`, …) are dropped, and a parameter's name is dropped
when a type stands before it (`DeviceIndex device` is `DeviceIndex`); pointers and template arguments are kept.
Operators (`aten::…`), registrations and Python functions are not methods of a header class, so no row of theirs is
read here.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import torch

import torch_sim
from tests.docs.test_guide_interface_tables import interface_section, page_of, table_rows

INCLUDE = Path(torch.__file__).resolve().parent / "include"
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
_TOKEN = re.compile(r"\w+|::|\.\.\.|[<>,*&()\[\]]")
_BUILTIN = {"void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed"}
_DROPPED = {"const", "volatile", "struct", "class", "typename", "&", "C10_UNUSED"}


def _split_top_level(text: str, separator: str = ",") -> list[str]:
    """`text` split at `separator` outside (), <>, [] and {}."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "(<[{":
            depth += 1
        elif char in ")>]}":
            depth -= 1
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def normalised_type(parameter: str) -> str:
    """One parameter's type by the rule in this file's docstring."""
    parameter = re.sub(r"\[\[[^\]]*\]\]", " ", _COMMENT.sub(" ", parameter))
    parameter = _split_top_level(parameter, "=")[0] if "=" in parameter else parameter
    tokens = [token for token in _TOKEN.findall(parameter.replace("&&", "&")) if token not in _DROPPED]
    kept: list[str] = []
    for token in tokens:
        if token == "::":
            if kept and re.match(r"^\w+$", kept[-1]):
                kept.pop()  # the qualifier before `::`
            continue
        kept.append(token)
    names = [index for index, token in enumerate(kept) if re.match(r"^\w+$", token)]
    if len(kept) > 1 and names and names[-1] == len(kept) - 1 and kept[-1] not in _BUILTIN:
        before = kept[-2]
        if re.match(r"^\w+$", before) or before in {">", "*", "]"}:
            kept.pop()  # the parameter's name
    text = ""
    for token in kept:
        if text and re.match(r"^\w", token) and re.match(r".*\w$", text):
            text += " "
        text += token
    return text


def parameter_types(parameters: str) -> tuple[str, ...]:
    """The normalised types of a parameter list (the text between the parentheses)."""
    parameters = parameters.strip()
    if parameters in ("", "void"):
        return ()
    return tuple(normalised_type(parameter) for parameter in _split_top_level(parameters))


def _balanced(text: str, open_index: int) -> int:
    """The index just past the parenthesis that closes the one at `open_index`."""
    depth = 0
    for index in range(open_index, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    raise ValueError("unbalanced parentheses")


@functools.cache
def _header(path: Path) -> str:
    return _STRING.sub('""', _COMMENT.sub(" ", path.read_text(errors="replace")))


@functools.cache
def _headers() -> tuple[tuple[Path, bytes], ...]:
    """Every installed header with its bytes, read once per test session."""
    return tuple((path, path.read_bytes()) for path in sorted(INCLUDE.rglob("*")) if path.suffix in {".h", ".hpp"})


@functools.cache
def class_definition(qualified: str) -> tuple[str, list[str]] | None:
    """(the body at its own brace depth, the base classes' names) of the class `qualified` names, if a header has it.

    Nested bodies (inline method definitions) are cut out, so only the class's own declarations remain."""
    *namespaces, name = qualified.split("::")
    pattern = re.compile(rf"(?<!enum )\b(?:class|struct)\s+(?:\w+\s+)*?{re.escape(name)}\s*(?:final\s*)?(:[^;{{]*)?\{{")
    candidates = []
    for path, raw in _headers():
        if name.encode() not in raw:
            continue
        code = _header(path)
        for match in pattern.finditer(code):
            opens = [f"namespace {space}" in code or f"::{space}" in code or f"{space}::" in code
                     for space in namespaces]
            candidates.append((not all(opens), str(path), code, match))
    if not candidates:
        return None
    _, _, code, match = sorted(candidates, key=lambda candidate: candidate[:2])[0]
    start = match.end()
    depth, own = 1, []
    for index in range(start, len(code)):
        char = code[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            own.append(char)
    bases = [re.sub(r"<.*", "", base.split()[-1]) for base in _split_top_level((match.group(1) or ":")[1:])]
    return "".join(own), [base for base in bases if base]


def declarations(qualified: str, method: str, seen: frozenset[str] = frozenset()) -> list[tuple[str, ...]]:
    """The parameter types of every declaration of `method` in the class, or else in its nearest base that has it."""
    definition = class_definition(qualified)
    if definition is None or qualified in seen:
        return []
    body, bases = definition
    found = []
    for match in re.finditer(rf"(?<![\w.:>~]){re.escape(method)}\s*\(", body):
        before = body[:match.start()].rstrip()
        if before.endswith(("=", "return", ",", "(")):
            continue  # a call or an initialiser, not a declaration
        open_index = match.end() - 1
        found.append(parameter_types(body[open_index + 1:_balanced(body, open_index) - 1]))
    if found:
        return found
    namespace = qualified.rsplit("::", 1)[0] + "::" if "::" in qualified else ""
    for base in bases:
        inherited = declarations(base if "::" in base else namespace + base, method, seen | {qualified})
        if inherited:
            return inherited
    return []


def _tables_with_captions(section: str) -> list[tuple[str, str]]:
    """(caption, table markdown) for each table of a section; the caption is the paragraph right before it."""
    lines = section.splitlines()
    tables, index = [], 0
    while index < len(lines):
        if lines[index].lstrip().startswith("|"):
            end = index
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            caption_end = index
            while caption_end > 0 and not lines[caption_end - 1].strip():
                caption_end -= 1
            caption_start = caption_end
            while caption_start > 0 and lines[caption_start - 1].strip() and \
                    not lines[caption_start - 1].lstrip().startswith("|"):
                caption_start -= 1
            tables.append(("\n".join(lines[caption_start:caption_end]), "\n".join(lines[index:end])))
            index = end
        else:
            index += 1
    return tables


def _classes(text: str) -> list[str]:
    names = [span.strip() for span in _CODE_SPAN.findall(text) if re.match(r"^(?:\w+::)*[A-Z]\w*$", span.strip())]
    return [name for name in dict.fromkeys(names) if class_definition(name) is not None]


def signature_rows(page_markdown: str) -> list[tuple[str, str, list[str]]]:
    """(span, method, the row's classes) for each first-cell code span that names a method of the row's classes."""
    found = []
    for caption, table in _tables_with_captions(page_markdown):
        caption_classes = _classes(caption)
        for row in table_rows(table):
            classes = _classes(row[0]) + caption_classes
            class_names = {cls.split("::")[-1] for cls in classes}
            for span in _CODE_SPAN.findall(row[0]):
                name = re.match(r"^(?:[\w.]+(?:::|\.))?(~?\w+)\s*(?:\(|$)", span.strip())
                if name is None or name.group(1) in class_names:
                    continue  # a class named in the row, or its constructor
                if any(declarations(cls, name.group(1)) for cls in classes):
                    found.append((span.strip(), name.group(1), classes))
    return found


def signature_problems(page_markdown: str) -> list[str]:
    problems = []
    for span, method, classes in signature_rows(page_markdown):
        owner = next(cls for cls in classes if declarations(cls, method))
        declared = declarations(owner, method)
        call = re.match(rf"^.*?\b{re.escape(method)}\s*\((.*)\)\s*$", span)
        if call is None:
            problems.append(f"`{span}` is a method of {owner}: give its parameter types, "
                            f"e.g. `{method}({', '.join(declared[0])})`")
        elif parameter_types(call.group(1)) not in declared:
            problems.append(f"`{span}`: {owner}::{method} takes "
                            + " or ".join(f"({', '.join(types)})" for types in declared)
                            + f", the page says ({', '.join(parameter_types(call.group(1)))})")
    return problems


def test_types_are_normalised_and_declarations_found_in_the_installed_headers():
    assert parameter_types("void** /*event*/, const Stream& stream, const DeviceIndex device_index = -1, "
                           "const c10::EventFlag flag") == ("void**", "Stream", "DeviceIndex", "EventFlag")
    assert parameter_types("const std::set<libkineto::ActivityType>& types, unsigned int n") == (
        "set<ActivityType>", "unsigned int")
    assert parameter_types("") == () and parameter_types("int64_t*") == ("int64_t*",)
    assert ("void**", "Stream", "DeviceIndex", "EventFlag") in declarations("c10::impl::DeviceGuardImplInterface",
                                                                           "record")
    assert declarations("c10::DeviceAllocator", "emptyCache") == [("MempoolId_t",)]
    assert declarations("c10::DeviceAllocator", "allocate") == [("size_t",)]  # from its base, c10::Allocator
    assert declarations("c10::DeviceAllocator", "notAMethod") == []
    page = ("**The graph, `at::GraphImplInterface`**:\n\n| method | for |\n| --- | --- |\n"
            "| `replay()` | a |\n| `capture_begin(pool, mode)` | b |\n| `REGISTER_GRAPH_IMPL(n, C)` | c |\n"
            "| `reset` | d |\n")
    assert [span for span, _, _ in signature_rows(page)] == ["replay()", "capture_begin(pool, mode)", "reset"]
    problems = signature_problems(page)
    assert len(problems) == 2 and "capture_begin" in problems[0] and "`reset`" in problems[1]


@pytest.mark.parametrize("step", torch_sim.GUIDE, ids=lambda step: step.name)
def test_the_interface_table_gives_each_cpp_method_the_headers_parameter_types(step):
    section = interface_section(json.loads(page_of(step).read_text()))
    assert section is not None, f"{page_of(step).name} has no section '## The interface'"
    problems = signature_problems(section)
    assert not problems, f"{page_of(step).name}:\n" + "\n".join(problems)


def test_the_pages_with_cpp_interfaces_table_their_methods_with_signatures():
    """The rule must keep finding the C++ methods on the pages of the steps that implement C++ interfaces."""
    by_step = {step.name: len(signature_rows(interface_section(json.loads(page_of(step).read_text())) or ""))
               for step in torch_sim.GUIDE}
    cpp_steps = ["hooks", "guard", "allocator", "streams_events", "generator", "profiler", "distributed", "graphs"]
    assert all(by_step[name] >= 5 for name in cpp_steps), by_step
