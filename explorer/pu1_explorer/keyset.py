"""A tensor's DispatchKeySet bit by bit: backend bits, functionality bits, and what the thread adds or removes.

A DispatchKeySet is a 64-bit word. Its low bits name backends (CPU, CUDA, ...,
PrivateUse1, Meta); the rest name functionalities (Dense, Sparse, Autograd,
Autocast..., Python, ...). A runtime key such as `AutogradPrivateUse1` is a
per-backend functionality bit *and* a backend bit. There are few backend bits,
which is why an out-of-tree device borrows PrivateUse1's instead of getting one of
its own. Every position here is read from the running torch, not from a table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from pu1_explorer import dispatcher

DispatchKey = torch.DispatchKey
DispatchKeySet = torch.DispatchKeySet
WORD_BITS = 64


@dataclass(frozen=True)
class Bit:
    """One bit of the word: its position, its name, and where the picture's key set has it."""

    index: int
    name: str
    in_tensor: bool = False
    included: bool = False  # added by the thread's local include set
    excluded: bool = False  # removed by the thread's local exclude set (functionality bits only)

    @property
    def effective(self) -> bool:
        """Set in what the dispatcher finally looks at."""
        return (self.in_tensor or self.included) and not self.excluded


@dataclass(frozen=True)
class RuntimeKey:
    """A per-backend functionality combined with a backend bit (e.g. Autograd × PrivateUse1)."""

    name: str
    functionality: str
    backend: str
    effective: bool


@dataclass
class KeySetPicture:
    """Everything the key-set figure draws, as plain data."""

    label: str
    device_name: str  # the PrivateUse1 backend's registered name, e.g. "sim"
    raw: int  # the tensor's (or given) key set as a 64-bit word
    include: int  # the thread's local include set
    exclude: int  # the thread's local exclude set
    effective: int  # (raw | include) minus exclude, as the dispatcher computes it
    first_key: str  # the highest-priority key of the effective set: where dispatch starts
    keys: list[str] = field(default_factory=list)  # the effective set's runtime keys, in the order they are tried
    backend_bits: list[Bit] = field(default_factory=list)
    functionality_bits: list[Bit] = field(default_factory=list)
    per_backend: list[str] = field(default_factory=list)  # functionalities that combine with backend bits
    runtime_keys: list[RuntimeKey] = field(default_factory=list)  # one per per-backend functionality × backend

    def bit(self, name: str) -> Bit:
        """A bit by name (a backend's or a functionality's)."""
        for entry in self.backend_bits + self.functionality_bits:
            if entry.name == name:
                return entry
        raise KeyError(f"no bit named {name!r}; backends: {', '.join(b.name for b in self.backend_bits)}")


def _raw(key: DispatchKey) -> int:
    return DispatchKeySet(key).raw_repr()


def _bits(word: int) -> list[int]:
    return [index for index in range(WORD_BITS) if word >> index & 1]


@functools.lru_cache(maxsize=None)
def layout() -> tuple[dict[int, str], dict[int, str], dict[tuple[int, int], str]]:
    """The word's layout in this torch: backend bit -> backend, functionality bit -> name,
    (functionality bit, backend bit) -> runtime key."""
    dense = _raw(DispatchKey.Dense)
    backends: dict[int, str] = {}
    functionalities: dict[int, str] = {}
    runtime: dict[tuple[int, int], str] = {}
    for name, key in DispatchKey.__members__.items():
        if name.startswith(("StartOf", "EndOf")):
            continue
        word = _raw(key)
        bits = _bits(word)
        if len(bits) == 1 and name == "Dense":
            functionalities[bits[0]] = name
        elif len(bits) == 2 and word & dense:  # a dense backend: the Dense bit and its backend bit
            backends[bits[0]] = name
    backend_mask = sum(1 << index for index in backends)
    for name, key in DispatchKey.__members__.items():
        if name.startswith(("StartOf", "EndOf")):
            continue
        bits = _bits(_raw(key))
        functionality = [index for index in bits if not backend_mask >> index & 1]
        backend = [index for index in bits if backend_mask >> index & 1]
        if len(functionality) == 1 and not backend:
            functionalities.setdefault(functionality[0], name)
        elif len(functionality) == 1 and len(backend) == 1:
            runtime.setdefault((functionality[0], backend[0]), name)
    # Functionality keys that torch.DispatchKey does not list still print their names in a key set.
    # The word's top bit is left out: torch asserts when it is printed alone.
    for index in range(max(backends) + 1, WORD_BITS - 1):
        if index not in functionalities:
            printed = str(DispatchKeySet.from_raw_repr(1 << index))
            name = printed[printed.index("(") + 1:-1]
            if name:
                functionalities[index] = name
    return backends, functionalities, runtime


def _describe(tensor: torch.Tensor) -> str:
    grad = ", requires grad" if tensor.requires_grad else ""
    return f"{str(tensor.dtype).removeprefix('torch.')} tensor on {tensor.device}{grad}"


def _word_of(subject: object) -> tuple[int, str]:
    if isinstance(subject, torch.Tensor):
        return dispatcher.tensor_key_set(subject).raw_repr(), _describe(subject)
    if isinstance(subject, DispatchKeySet):
        return subject.raw_repr(), "a key set"
    if isinstance(subject, DispatchKey):
        return DispatchKeySet(subject).raw_repr(), f"the key {subject.name}"
    if isinstance(subject, (str, torch.device)):
        try:
            device = torch.device(subject)
        except RuntimeError as error:
            raise ValueError(f"{subject!r} is not a device ({error}); pass a tensor, a device such as "
                             f"'{torch.device('privateuseone').type}' or a DispatchKeySet") from None
        try:
            tensor = torch.empty(0, device=device)
        except (RuntimeError, AssertionError, NotImplementedError) as error:
            reason = (str(error).splitlines() or [type(error).__name__])[0].split(". ")[0][:160]
            raise ValueError(f"cannot make a tensor on {device} in this process ({reason}); pass a "
                             f"DispatchKeySet instead") from None
        return dispatcher.tensor_key_set(tensor).raw_repr(), f"new {_describe(tensor)}"
    raise TypeError(f"key_set() takes a tensor, a device, a DispatchKey or a DispatchKeySet, "
                    f"not {type(subject).__name__}")


def priority_order(word: int) -> list[str]:
    """The runtime keys of a key set, highest priority first: the order the dispatcher tries them."""
    remaining, order = DispatchKeySet.from_raw_repr(word), []
    while (key := remaining.highestPriorityTypeId()) != DispatchKey.Undefined:
        order.append(key.name)
        remaining = remaining.remove(key)
    return order


def key_set(subject: object, *, include_thread_local: bool = True) -> KeySetPicture:
    """A tensor's key set (or a new tensor's on a device, or a key's, or a key set's) bit by bit, with what the
    current thread's local include and exclude sets do to it (`include_thread_local=False` leaves them out)."""
    raw, label = _word_of(subject)
    include = dispatcher.thread_local_include_set().raw_repr() if include_thread_local else 0
    exclude = dispatcher.thread_local_exclude_set().raw_repr() if include_thread_local else 0
    backends, functionalities, runtime = layout()
    backend_mask = sum(1 << index for index in backends)
    effective = (raw | include) & (backend_mask | ~exclude) & ((1 << WORD_BITS) - 1)
    keys = priority_order(effective)
    device_name = torch.device('privateuseone').type

    def bit(index: int, name: str, is_backend: bool) -> Bit:
        return Bit(index, name, bool(raw >> index & 1), bool(include >> index & 1 and not raw >> index & 1),
                   bool(not is_backend and exclude >> index & 1 and (raw | include) >> index & 1))

    per_backend = [functionalities[index] for index in sorted({f for f, _ in runtime})]
    return KeySetPicture(
        label=label, device_name=device_name, raw=raw, include=include, exclude=exclude, effective=effective,
        first_key=keys[0] if keys else DispatchKey.Undefined.name, keys=keys,
        backend_bits=[bit(index, name, True) for index, name in sorted(backends.items())],
        functionality_bits=[bit(index, name, False) for index, name in sorted(functionalities.items())],
        per_backend=per_backend,
        runtime_keys=[RuntimeKey(name, functionalities[f], backends[b], bool(effective >> f & effective >> b & 1))
                      for (f, b), name in sorted(runtime.items())],
    )
