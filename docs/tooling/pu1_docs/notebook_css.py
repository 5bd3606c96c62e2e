"""mkdocs-jupyter's notebook stylesheet, cut down to what the site's pages can use.

mkdocs-jupyter inlines JupyterLab's whole stylesheet (over half a megabyte, mostly the styles of JupyterLab's own user
interface) into every notebook page. `purge` keeps the rules whose selectors can match the pages, judged by the class
names the pages use (`used_classes`), and the custom properties that what is kept uses.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import tinycss2
from tinycss2.ast import AtRule, Declaration, FunctionBlock, Node, QualifiedRule

_CLASS_ATTRIBUTE = re.compile(r"""\bclass\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
_VAR_REFERENCE = re.compile(r"var\(\s*(--[\w-]+)")
_WORD = re.compile(r"-?[A-Za-z_][\w-]*")
# Pseudo-classes whose argument is a selector list that matches when any of its selectors does.
_ANY_OF = {"is", "where", "matches", "-webkit-any", "-moz-any", "has"}
_GROUPS = {"media", "supports"}


def used_classes(pages: Iterable[str]) -> set[str]:
    """Every class name in a `class` attribute of the HTML texts `pages`."""
    classes: set[str] = set()
    for page in pages:
        for double, single in _CLASS_ATTRIBUTE.findall(page):
            classes.update((double or single).split())
    return classes


def script_words(scripts: Iterable[str]) -> set[str]:
    """Every name-like word of the JavaScript texts `scripts`: the class names the scripts may give elements at run
    time (mkdocs-material wraps a table in a `md-typeset__scrollwrap` div, which the notebook stylesheet styles)."""
    return {word for script in scripts for word in _WORD.findall(script)}


def used_properties(texts: Iterable[str]) -> set[str]:
    """The custom properties that `texts` (HTML pages, stylesheets) read with `var(--name`: a purged stylesheet must
    still define those that it defines."""
    return {name for text in texts for name in _VAR_REFERENCE.findall(text)}


def _significant(tokens: Iterable[Node]) -> list[Node]:
    return [token for token in tokens if token.type != "comment"]


def _split(tokens: list[Node], separator: str = ",") -> list[list[Node]]:
    parts: list[list[Node]] = [[]]
    for token in tokens:
        if token.type == "literal" and token.value == separator:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _compact(tokens: Iterable[Node]) -> str:
    """`tokens` serialized with no comments, no whitespace at either end and single spaces between."""
    runs: list[list[Node]] = [[]]
    for token in _significant(tokens):
        if token.type == "whitespace":
            runs.append([])
        else:
            runs[-1].append(token)
    return " ".join(tinycss2.serialize(run) for run in runs if run)


def _can_match(selector: list[Node], classes: set[str]) -> bool:
    """Whether the selector's class names are all in `classes`, leaving out those under `:not(...)` (an unused class
    there never stops a match)."""
    previous = None
    for token in selector:
        if previous is not None and previous.type == "literal" and previous.value == ".":
            if token.type == "ident" and token.value not in classes:
                return False
        if isinstance(token, FunctionBlock) and token.lower_name != "not":
            alternatives = _split(_significant(token.arguments))
            if token.lower_name in _ANY_OF:
                if not any(_can_match(alternative, classes) for alternative in alternatives):
                    return False
            elif not all(_can_match(alternative, classes) for alternative in alternatives):
                return False
        previous = token
    return True


class _Rule:
    """A style rule being purged: the selectors it keeps and its declarations (a nested rule kept as it is)."""

    def __init__(self, selectors: list[str], content: list[Node]) -> None:
        self.selectors = selectors
        self.content = content

    def serialize(self, dropped: set[str]) -> str:
        parts = []
        for item in self.content:
            if isinstance(item, Declaration):
                if item.name.startswith("--") and item.name in dropped:
                    continue
                # an empty custom property keeps a space, which every browser reads as a value
                value = _compact(item.value) or (" " if item.name.startswith("--") else "")
                parts.append(f"{item.name}:{value}{'!important' if item.important else ''}")
            else:
                parts.append(item.serialize())
        return f"{','.join(self.selectors)}{{{';'.join(parts)}}}" if parts else ""


class _Group:
    """An @media or @supports block being purged."""

    def __init__(self, rule: AtRule, children: list) -> None:
        self.head = f"@{rule.at_keyword} {_compact(rule.prelude)}"
        self.children = children

    def serialize(self, dropped: set[str]) -> str:
        inner = "".join(child.serialize(dropped) for child in self.children)
        return f"{self.head}{{{inner}}}" if inner else ""


class _Verbatim:
    """An at-rule kept as it is (@font-face, @keyframes, @charset...)."""

    def __init__(self, rule: AtRule) -> None:
        self.rule = rule

    def serialize(self, dropped: set[str]) -> str:
        rule = self.rule
        head = f"@{rule.at_keyword} {_compact(rule.prelude)}".rstrip()
        return f"{head};" if rule.content is None else f"{head}{{{tinycss2.serialize(rule.content).strip()}}}"


def _purged(nodes: Iterable[Node], classes: set[str]) -> list:
    kept: list = []
    for node in nodes:
        if isinstance(node, QualifiedRule):
            selectors = [_compact(selector) for selector in _split(_significant(node.prelude))
                         if _can_match(selector, classes)]
            if selectors:
                content = tinycss2.parse_blocks_contents(node.content, skip_whitespace=True, skip_comments=True)
                kept.append(_Rule(selectors, [item for item in content if item.type != "error"]))
        elif isinstance(node, AtRule) and node.lower_at_keyword in _GROUPS and node.content is not None:
            rules = tinycss2.parse_rule_list(node.content, skip_whitespace=True, skip_comments=True)
            kept.append(_Group(node, _purged(rules, classes)))
        elif isinstance(node, AtRule):
            kept.append(_Verbatim(node))
    return kept


def _leaves(items: list) -> Iterator[_Rule | _Verbatim]:
    for item in items:
        if isinstance(item, _Group):
            yield from _leaves(item.children)
        else:
            yield item


def _references(tokens: Iterable[Node]) -> Iterator[str]:
    """The custom properties that `tokens` read with var()."""
    for token in tokens:
        if isinstance(token, FunctionBlock):
            if token.lower_name == "var":
                name = next((argument for argument in _significant(token.arguments) if argument.type != "whitespace"),
                            None)
                if name is not None and name.type == "ident" and name.value.startswith("--"):
                    yield name.value
            yield from _references(token.arguments)
        elif token.type in ("() block", "[] block", "{} block"):
            yield from _references(token.content)


def _dropped_properties(items: list, used_elsewhere: set[str]) -> set[str]:
    """The custom properties that nothing kept reads, directly or through another custom property."""
    read = set(used_elsewhere)
    defined: dict[str, set[str]] = {}
    for item in _leaves(items):
        if isinstance(item, _Verbatim):
            read.update(_references([*item.rule.prelude, *(item.rule.content or [])]))
            continue
        for declaration in item.content:
            if isinstance(declaration, Declaration) and declaration.name.startswith("--"):
                defined.setdefault(declaration.name, set()).update(_references(declaration.value))
            elif isinstance(declaration, Declaration):
                read.update(_references(declaration.value))
            else:  # a nested rule
                read.update(_references([*declaration.prelude, *(declaration.content or [])]))
    pending = list(read)
    while pending:
        for name in defined.get(pending.pop(), ()):
            if name not in read:
                read.add(name)
                pending.append(name)
    return set(defined) - read


def purge(css: str, classes: set[str], used_elsewhere: Iterable[str] = ()) -> str:
    """The stylesheet `css` with only the rules that can apply to pages using `classes` and the custom properties
    something kept (or `used_elsewhere`: the pages' other styles) reads; compactly serialized."""
    items = _purged(tinycss2.parse_stylesheet(css, skip_whitespace=True, skip_comments=True), classes)
    dropped = _dropped_properties(items, set(used_elsewhere))
    return "".join(item.serialize(dropped) for item in items)
