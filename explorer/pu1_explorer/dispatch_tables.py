"""Computed dispatch tables: for an operator and a set of dispatch keys, which kernel runs and who registered it.

Everything is read from the dispatcher of this process (its computed table dumps, `pu1_explorer.dispatcher`),
so it works for CPU, for sim, and for any PrivateUse1 backend.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from pu1_explorer import dispatcher

# What a computed entry can be. The dump's own tags map onto these names.
KERNEL = "kernel"
COMPOSITE_IMPLICIT = "composite_implicit"
COMPOSITE_EXPLICIT = "composite_explicit"
COMPOSITE_EXPLICIT_NONFUNCTIONAL = "composite_explicit_nonfunctional"
AUTOGRAD = "autograd"
FALLBACK = "fallback"
FALLTHROUGH = "fallthrough"
MISSING = "missing"
KERNEL_KINDS: tuple[str, ...] = (KERNEL, COMPOSITE_IMPLICIT, COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NONFUNCTIONAL,
                                 AUTOGRAD, FALLBACK, FALLTHROUGH, MISSING)
KIND_DESCRIPTIONS: dict[str, str] = {
    KERNEL: "a kernel registered for this key",
    COMPOSITE_IMPLICIT: "CompositeImplicitAutograd: decomposes into other operators, autograd included",
    COMPOSITE_EXPLICIT: "CompositeExplicitAutograd: one kernel for every backend, calls other operators",
    COMPOSITE_EXPLICIT_NONFUNCTIONAL: "CompositeExplicitAutogradNonFunctional: a functional wrapper over the out= or in-place form",
    AUTOGRAD: "an autograd kernel: records the backward graph, then redispatches",
    FALLBACK: "the key's backend fallback, registered for every operator",
    FALLTHROUGH: "fallthrough: the key is skipped for this operator",
    MISSING: "no kernel: calling the operator with this key fails",
}

DEFAULT_KEYS: tuple[str, ...] = (
    "AutocastCPU", "AutocastPrivateUse1", "AutogradCPU", "AutogradPrivateUse1", "ADInplaceOrView",
    "BackendSelect", "CPU", "PrivateUse1", "Meta",
)

_LINE = re.compile(r"^(?P<key>\w+): (?P<fallthrough>fallthrough )?registered at (?P<where>.*) \[(?P<tag>[^\]]+)\]$")
_TAG_KINDS = {
    "kernel": KERNEL,
    "math kernel": COMPOSITE_IMPLICIT,
    "autograd kernel": AUTOGRAD,
    "backend fallback": FALLBACK,
}


_PROJECT = Path(__file__).resolve().parents[2]


def short_path(path: str) -> str:
    """A source path without the folders of the machine it was on: from the package (`torch/...`), PyTorch's
    source tree (`aten/src/...`, PyTorch's own build machine), or the project (`backend/torch_sim/csrc/...`)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    for marker in ("/build/aten/", "/aten/src/", "/torch/csrc/"):
        if marker in path:
            return marker[1:] + path.split(marker, 1)[1]
    try:
        return str(Path(path).resolve().relative_to(_PROJECT))
    except (ValueError, OSError):
        return path


class UnknownOperatorError(ValueError):
    """An operator name that the dispatcher does not know; the message suggests close matches."""


@dataclass(frozen=True)
class KernelEntry:
    """One cell of a computed dispatch table."""

    operator: str
    key: str
    kind: str
    file: str | None = None
    line: int | None = None

    @property
    def provenance(self) -> str:
        """Where the kernel was registered, as file:line (empty when there is no kernel), with the file relative
        to the installed packages or the project, so that no machine's own folders show."""
        if self.file is None:
            return ""
        where = short_path(self.file)
        return f"{where}:{self.line}" if self.line is not None else where

    @property
    def is_python(self) -> bool:
        """A kernel written in Python (a .py file, or code without a file such as `python -c`)."""
        return bool(self.file and (self.file.endswith(".py") or self.file.startswith("<")))

    def to_dict(self) -> dict:
        return {**asdict(self), "provenance": self.provenance, "is_python": self.is_python}


def _operator_names() -> tuple[str, ...]:
    return tuple(dispatcher.operator_names())


def all_operators(namespace: str | None = "aten") -> list[str]:
    """Every registered operator overload, as 'namespace::name.overload' (or 'namespace::name')."""
    names = dispatcher.operator_names()
    if namespace is None:
        return sorted(names)
    prefix = f"{namespace}::"
    return sorted(name for name in names if name.startswith(prefix))


def resolve_operator(name: str) -> str:
    """Normalise 'add.Tensor', 'aten.add.Tensor', 'torch.ops.aten.add.Tensor' or an OpOverload to 'aten::add.Tensor'.

    A name without an overload resolves to its default overload when there is one.
    """
    if not isinstance(name, str):
        if hasattr(name, "_schema"):
            schema = name._schema
            return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        raise TypeError(f"an operator name must be a string or an OpOverload, got {type(name).__name__}")
    known = set(_operator_names())
    text = name.strip().removeprefix("torch.ops.")
    if "::" not in text:
        namespace, _, rest = text.partition(".")
        namespaces = {operator.split("::")[0] for operator in known}
        text = f"{namespace}::{rest}" if rest and namespace in namespaces else f"aten::{text}"
    if text in known:
        return text
    if text.endswith(".default") and text[: -len(".default")] in known:
        return text[: -len(".default")]
    overloads = sorted(op for op in known if op.startswith(text + "."))
    if overloads:
        raise UnknownOperatorError(
            f"{name!r} names several overloads; pick one of: {', '.join(overloads[:12])}"
            + (" …" if len(overloads) > 12 else "")
        )
    suggestions = difflib.get_close_matches(text, sorted(known), n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else "; see pu1_explorer.all_operators()"
    raise UnknownOperatorError(f"unknown operator {name!r}{hint}")


def _parse_line(operator: str, text: str) -> KernelEntry | None:
    match = _LINE.match(text.strip())
    if not match:
        return None
    key = match["key"]
    where = match["where"]
    file, _, line = where.rpartition(":")
    if not file or not line.isdigit():
        file, line = where, ""
    tag = match["tag"]
    if match["fallthrough"]:
        kind = FALLTHROUGH
    elif tag == "default backend kernel":
        kind = COMPOSITE_EXPLICIT_NONFUNCTIONAL if "NonFunctional" in file else COMPOSITE_EXPLICIT
    else:
        kind = _TAG_KINDS.get(tag, KERNEL)
    return KernelEntry(operator, key, kind, file, int(line) if line else None)


def entry_from_dump(operator: str, dump: str, key: str) -> KernelEntry:
    """The entry of one key, found directly in a dump without parsing the other lines."""
    start = 0 if dump.startswith(key + ":") else dump.find("\n" + key + ":") + 1
    if start == 0 and not dump.startswith(key + ":"):
        return KernelEntry(operator, key, MISSING)
    end = dump.find("\n", start)
    entry = _parse_line(operator, dump[start:] if end < 0 else dump[start:end])
    return entry or KernelEntry(operator, key, MISSING)


def _parse_dump(operator: str, dump: str) -> dict[str, KernelEntry]:
    entries: dict[str, KernelEntry] = {}
    for text in dump.splitlines():
        entry = _parse_line(operator, text)
        if entry is not None:
            entries[entry.key] = entry
    return entries


def computed_table(operator: str) -> dict[str, KernelEntry]:
    """The whole computed table of one operator overload, key -> entry (keys without a kernel are absent)."""
    resolved = resolve_operator(operator)
    return _parse_dump(resolved, dispatcher.dump_table(resolved))


def canonical_key(key: str) -> str:
    """Accept the backend's renamed spelling too: 'sim' -> 'PrivateUse1', 'AutogradSim' -> 'AutogradPrivateUse1'."""
    backend = torch.device("privateuseone").type
    if backend != "privateuseone":
        for prefix in ("", "Autograd", "Autocast", "Sparse", "Quantized", "NestedTensor"):
            if key.lower() == (prefix + backend).lower():
                return prefix + "PrivateUse1"
    try:
        getattr(torch.DispatchKey, key)
    except AttributeError:
        names = [name for name in dir(torch.DispatchKey) if not name.startswith("_")]
        suggestions = difflib.get_close_matches(key, names, n=3)
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        if not hint:
            from pu1_explorer.devices import known_devices

            hint = f" (the devices this process knows: {', '.join(known_devices())})"
        raise ValueError(f"unknown dispatch key {key!r}{hint}") from None
    return key


def dispatch_table(operator: str, keys: tuple[str, ...] | list[str] | None = None) -> list[KernelEntry]:
    """The computed entries of `operator` for `keys` (default DEFAULT_KEYS), in the order given."""
    resolved = resolve_operator(operator)
    table = computed_table(resolved)
    result = []
    for key in keys or DEFAULT_KEYS:
        canonical = canonical_key(key)
        result.append(table.get(canonical, KernelEntry(resolved, canonical, MISSING)))
    return result


ROLES: tuple[str, ...] = ("Autocast", "Autograd", "ADInplaceOrView", "BackendSelect", "Backend")


def role_keys(backend: str) -> dict[str, str]:
    """The keys that play each role for one backend: 'sim' -> AutocastPrivateUse1, AutogradPrivateUse1, …"""
    key = canonical_key(backend)
    suffix = "PrivateUse1" if key == "PrivateUse1" else key
    keys = {"Autocast": f"Autocast{suffix}", "Autograd": f"Autograd{suffix}", "ADInplaceOrView": "ADInplaceOrView",
            "BackendSelect": "BackendSelect", "Backend": key}
    return {role: name for role, name in keys.items() if hasattr(torch.DispatchKey, name)}


def backend_tables(operator: str, backends: tuple[str, ...] | list[str]) -> dict[str, list[KernelEntry]]:
    """Side by side: for each backend, the entries of the keys that play each role (see ROLES)."""
    resolved = resolve_operator(operator)
    table = computed_table(resolved)
    result = {}
    for backend in backends:
        entries = []
        for role, key in role_keys(backend).items():
            entry = table.get(key, KernelEntry(resolved, key, MISSING))
            entries.append(KernelEntry(entry.operator, role, entry.kind, entry.file, entry.line))
        result[backend] = entries
    return result
