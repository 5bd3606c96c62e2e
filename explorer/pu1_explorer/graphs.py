"""Captured graphs as plain data: a backend's graph dump read back, and what replaying a graph saves the dispatcher.

A backend that implements `torch.accelerator.Graph` can write what it captured with `graph.debug_dump(path)` (after
`graph.enable_debug_mode()` and the capture). The explorer reads one JSON shape, which sim writes, and so
does every backend that `pu1-explorer new` generates from sim's code:

    {"device": "sim:0", "pool": [a, b],
     "kernels": [{"index": 0, "operator": "aten::mul.Tensor", "kernel": "sim::mul.Tensor",
                  "reads": [T, ...], "writes": [T, ...]}, ...]}

with each T = {"id": "t0", "address": "0x7f..", "shape": [64, 64], "dtype": "float32"}. `read_graph_dump` turns
it into a `GraphDump`; `compare_replay_with_eager` traces the dispatcher while the same code runs eagerly and
while its captured graph replays, so that a reader sees the hops that capture removes.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pu1_explorer.tracer import Trace, trace


class GraphDumpError(ValueError):
    """A file or object that is not a graph dump in the shape above (the message says what is wrong, in one line)."""


@dataclass(frozen=True)
class GraphTensor:
    """A tensor a captured kernel reads or writes: its id in the dump, its device address, shape and dtype."""

    id: str
    address: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def label(self) -> str:
        """`t0 [64, 64] float32`: how figures name the tensor."""
        return f"{self.id} {list(self.shape)} {self.dtype}"


@dataclass(frozen=True)
class GraphKernel:
    """One kernel of the graph, in replay order: the operator that launched it and the tensors it reads and writes."""

    index: int
    operator: str
    kernel: str
    reads: tuple[GraphTensor, ...]
    writes: tuple[GraphTensor, ...]


@dataclass(frozen=True)
class GraphDump:
    """What a backend captured: the device, the graph's memory pool and its kernels in the order replay runs them."""

    device: str
    pool: tuple[int, int]
    kernels: tuple[GraphKernel, ...]

    @property
    def tensors(self) -> list[GraphTensor]:
        """Every tensor the kernels touch, once each, in the order the kernels first touch them."""
        seen: dict[str, GraphTensor] = {}
        for kernel in self.kernels:
            for tensor in (*kernel.reads, *kernel.writes):
                seen.setdefault(tensor.id, tensor)
        return list(seen.values())

    def operator_counts(self) -> dict[str, int]:
        """How many kernels each operator launched in the graph."""
        return dict(Counter(kernel.operator for kernel in self.kernels))

    def to_dict(self) -> dict:
        """The dump as the JSON object `debug_dump` writes."""
        def tensor(t: GraphTensor) -> dict:
            return {"id": t.id, "address": t.address, "shape": list(t.shape), "dtype": t.dtype}
        return {"device": self.device, "pool": list(self.pool),
                "kernels": [{"index": k.index, "operator": k.operator, "kernel": k.kernel,
                             "reads": [tensor(t) for t in k.reads], "writes": [tensor(t) for t in k.writes]}
                            for k in self.kernels]}


_SHAPE_HELP = ('a graph dump is a JSON object {"device", "pool", "kernels"} written by graph.debug_dump(path) after '
               "graph.enable_debug_mode() and a capture")


def _tensor(data: Any, where: str) -> GraphTensor:
    if not isinstance(data, dict) or not {"id", "shape", "dtype"} <= set(data):
        raise GraphDumpError(f"{where} is not a tensor {{id, address, shape, dtype}}: {_SHAPE_HELP}")
    shape = data["shape"]
    if not isinstance(shape, list) or not all(isinstance(size, int) for size in shape):
        raise GraphDumpError(f"{where} has shape {shape!r}, not a list of integers: {_SHAPE_HELP}")
    return GraphTensor(str(data["id"]), str(data.get("address", "")), tuple(shape), str(data["dtype"]))


def graph_dump_from_dict(data: Any, source: str = "the dump") -> GraphDump:
    """A `GraphDump` from the JSON object a backend's `debug_dump` wrote; GraphDumpError, in one line, otherwise."""
    if not isinstance(data, dict) or not {"device", "kernels"} <= set(data):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise GraphDumpError(f"{source} is not a graph dump (found {found}): {_SHAPE_HELP}")
    if not isinstance(data["kernels"], list):
        raise GraphDumpError(f"{source}: 'kernels' is not a list: {_SHAPE_HELP}")
    pool = data.get("pool") or [0, 0]
    if not (isinstance(pool, list) and len(pool) == 2 and all(isinstance(part, int) for part in pool)):
        raise GraphDumpError(f"{source}: 'pool' is {pool!r}, not two integers: {_SHAPE_HELP}")
    kernels = []
    for position, kernel in enumerate(data["kernels"]):
        where = f"{source}: kernel {position}"
        if not isinstance(kernel, dict) or "operator" not in kernel:
            raise GraphDumpError(f"{where} has no 'operator': {_SHAPE_HELP}")
        reads = tuple(_tensor(t, f"{where}, read {n}") for n, t in enumerate(kernel.get("reads", [])))
        writes = tuple(_tensor(t, f"{where}, write {n}") for n, t in enumerate(kernel.get("writes", [])))
        kernels.append(GraphKernel(int(kernel.get("index", position)), str(kernel["operator"]),
                                   str(kernel.get("kernel", "")), reads, writes))
    return GraphDump(str(data["device"]), (pool[0], pool[1]), tuple(kernels))


def read_graph_dump(path: str | os.PathLike) -> GraphDump:
    """Read the file `graph.debug_dump(path)` wrote; a file that is not such a dump is a GraphDumpError in one line."""
    path = Path(path)
    if not path.is_file():
        raise GraphDumpError(f"{path} does not exist: call graph.debug_dump({str(path)!r}) after the capture first")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GraphDumpError(f"{path} is not JSON ({error}): {_SHAPE_HELP}") from None
    return graph_dump_from_dict(data, str(path))


def dump_graph(graph: Any) -> GraphDump:
    """The `GraphDump` of a captured `torch.accelerator.Graph` (created with `enable_debug_mode()` called before its
    capture), through a temporary file."""
    with tempfile.TemporaryDirectory(prefix="pu1-graph-") as folder:
        path = Path(folder) / "graph.json"
        graph.debug_dump(str(path))
        return read_graph_dump(path)


@dataclass
class ReplayComparison:
    """The dispatcher's hops while code runs eagerly and while its captured graph replays, counted per operator
    and per key (skipped fallthrough hops are not counted: they cost nothing)."""

    device: str
    eager: Trace
    replay: Trace
    graph: GraphDump | None = None
    eager_by_operator: dict[str, int] = field(default_factory=dict)
    replay_by_operator: dict[str, int] = field(default_factory=dict)
    eager_by_key: dict[str, int] = field(default_factory=dict)
    replay_by_key: dict[str, int] = field(default_factory=dict)

    @property
    def eager_hops(self) -> int:
        return sum(self.eager_by_key.values())

    @property
    def replay_hops(self) -> int:
        return sum(self.replay_by_key.values())

    @property
    def removed_hops(self) -> int:
        """The hops the replay did not make."""
        return self.eager_hops - self.replay_hops

    def rows(self) -> list[dict]:
        """One row per operator, most eager hops first: {operator, eager, replay}."""
        names = sorted(set(self.eager_by_operator) | set(self.replay_by_operator),
                       key=lambda name: (-self.eager_by_operator.get(name, 0), name))
        return [{"operator": name, "eager": self.eager_by_operator.get(name, 0),
                 "replay": self.replay_by_operator.get(name, 0)} for name in names]


def _counts(recorded: Trace, attribute: str) -> dict[str, int]:
    return dict(Counter(getattr(hop, attribute) for hop in recorded.hops if not hop.skipped))


def compare_replay_with_eager(code: Callable[[], Any], device: str, warmup: int = 1,
                              stream: Any = None) -> ReplayComparison:
    """Trace `code` run eagerly on `device`, then capture it into a `torch.accelerator.Graph` on a side stream and
    trace one replay: the hops per operator and key of each. `code` must be capturable (static tensors, no
    synchronization); it runs `warmup` times on the side stream first, as a capture needs."""
    import torch

    side = stream if stream is not None else torch.Stream(device=device)
    with side:
        for _ in range(warmup):
            code()
    side.synchronize()
    with trace(device) as eager, side:
        code()
    graph = torch.accelerator.Graph()
    graph.enable_debug_mode()
    with side:
        with graph:
            code()
    with trace(device) as replayed:
        graph.replay()
    try:
        captured = dump_graph(graph)
    except (GraphDumpError, RuntimeError):  # a backend that dumps another format still gets its trace compared
        captured = None
    return ReplayComparison(device, eager, replayed, captured, _counts(eager, "operator"),
                            _counts(replayed, "operator"), _counts(eager, "key"), _counts(replayed, "key"))
