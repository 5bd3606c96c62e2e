"""Step 15, graphs: capture the work of a stream once and replay it many times (`torch.accelerator.Graph`).

PyTorch creates a device's graphs through `at::GraphImplInterface`, registered in
`at::GraphImplRegistry` under `c10::DeviceTypeName(PrivateUse1, false)` (sim's key is "SIM"); until
then `torch.accelerator.Graph()` says "Graph is not supported on device type: sim". sim's
implementation is backend/torch_sim/csrc/graphs.cpp (the interface, replay) and graphs_capture.cpp (recording).

- Capture happens on a non-default stream (`with torch.Stream(device="sim"), graph:` or
  `with torch.sim.graph(graph):`). Every kernel launched on that stream, autograd's backward
  included, is recorded instead of run: its Meta kernel gives the outputs' shapes, the graph's
  private pool their memory, and results appear only at replay. A whole training step is one graph.
- `replay()` calls the recorded host kernels directly on the same memory (through an out= overload
  when there is one, else compute and copy), without the dispatcher's keys. Random operators draw
  from the device generator at each replay, so N replays give the numbers of N eager steps.
- Memory allocated during a capture comes from the graph's private pool, reserved until the last
  graph using it is reset; a block freed during the capture serves its later allocations, as on
  CUDA. Graphs share a pool with `pool=other.pool()` or `torch.sim.graph_pool_handle()`;
  `torch.sim.memory_stats()` shows `reserved_bytes.graph_pool.current` and `graph_pools.current`.
- What cannot be captured fails the capture in CUDA's words ("operation not permitted when stream
  is capturing: ...") and leaves the stream usable: a synchronize, `.item()`, a copy from or to
  pageable host memory (pinned is fine), an operator whose output shape depends on data, a host
  tensor argument, a collective (simccl runs it at once on the host) and a function compiled by
  torch.compile (its generated code calls `torch.sim.refuse_if_capturing` first). A replay that
  silently skipped them would give wrong answers. Operators served by sim's fallback are captured
  like any other: the fallback computes on device memory with the host kernel a replay calls.
- `enable_debug_mode()` before the capture keeps what `debug_dump(path)` writes: JSON with each
  kernel in order and the tensors it reads and writes.

Where sim differs from CUDA: a graph keeps the tensors it uses from outside its pool alive until
reset (freed sim memory returns to a shared cache a replay must not write into); the capture error
modes all behave alike (sim has no call unsafe for other threads); a 0-dim host tensor argument is
read at capture; an out= overload that does not write in place (the host's mse_loss.out) is
replayed as its functional operator plus a copy; collectives and compiled code are refused, where
CUDA captures them.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from torch_sim.device_module import _device_index, export
from torch_sim.runtime import load_runtime


def graph_pool_handle() -> tuple[int, int]:
    """A new pool id to pass as `pool=` to several graphs, so that they share one private pool."""
    return tuple(load_runtime().graph_pool_handle())


def is_current_stream_capturing(device: Any = None) -> bool:
    """True while the current stream of `device` (default: the current sim device) captures a graph."""
    index = _device_index(device)
    return load_runtime().is_stream_capturing(index, torch.accelerator.current_stream(index).stream_id)


def refuse_if_capturing(what: str) -> None:
    """Fail the capture of the current stream of any sim device with `what`, work that a capture cannot record.

    The code torch.compile generates for sim calls it first: its C++ kernels would run at once, not at replay.
    """
    load_runtime().refuse_if_any_capturing(what)


@contextlib.contextmanager
def graph(target: torch.accelerator.Graph, pool: tuple[int, int] | None = None,
          stream: torch.Stream | None = None) -> Iterator[torch.accelerator.Graph]:
    """Capture the block into `target` on `stream` (default: a new sim stream), as `torch.cuda.graph` does.

    `pool` shares another graph's private pool (`other.pool()` or `graph_pool_handle()`).
    """
    if pool is not None:
        target.graph_pool = pool
    with stream if stream is not None else torch.Stream(device=torch.device("sim", _device_index(None))):
        with target:
            yield target


def install() -> None:
    load_runtime().install_graphs()
    export(graph_pool_handle, is_current_stream_capturing, graph, refuse_if_capturing)
