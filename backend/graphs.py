"""Step 15, graphs: capture the work of a stream once and replay it many times (`torch.accelerator.Graph`).

PyTorch creates a device's graphs through `at::GraphImplInterface`, which a backend registers in
`at::GraphImplRegistry` under `c10::DeviceTypeName(PrivateUse1, false)` (sim's key is "SIM"); until
then `torch.accelerator.Graph()` says "Graph is not supported on device type: sim". sim's
implementation is backend/csrc/graphs.cpp (the interface, replay) and graphs_capture.cpp (recording).

- Capture happens on a non-default stream, as with CUDA (`with torch.Stream(device="sim"),
  graph:`, or `with torch.sim.graph(graph):`, which makes the side stream itself). While it
  lasts, every kernel launched on that stream (also from autograd's thread, which runs the
  backward on the same stream) is recorded instead of run: the operator's Meta kernel gives the
  outputs' sizes and strides, the graph's private pool gives them memory, and the results
  appear only at replay. A whole training
  step (forward, backward, optimizer step) is one graph.
- `replay()` calls the recorded host kernels directly on the same memory, writing each output
  with the operator's out= overload when it has one (else it computes and copies), without the
  dispatcher's autograd and device keys. Random operators draw from the device generator's state
  at each replay, so N replays give the numbers of N eager steps.
- Memory allocated during a capture comes from the graph's private pool; a block freed in the
  pool stays reserved for it until the last graph using the pool is reset or deleted. Graphs
  share a pool with `pool=other.pool()` or `torch.sim.graph_pool_handle()`;
  `torch.sim.memory_stats()` shows `reserved_bytes.graph_pool.current`,
  `allocated_bytes.graph_pool.current` and `graph_pools.current`.
- What cannot be captured fails the capture with CUDA's words ("operation not permitted when
  stream is capturing: ...") and leaves the stream usable: a synchronize of the capturing stream
  or device, `.item()`, a copy from or to pageable host memory (pinned memory is fine), an
  operator without a Meta kernel (its output shapes depend on data), a host tensor argument.
  `capture_end()` then reports the first refusal. Operators served by sim's fallback are
  captured like any other: the fallback computes on device memory with the host kernel, which is
  exactly what a replay calls.
- `enable_debug_mode()` before the capture keeps what `debug_dump(path)` writes: JSON with each
  kernel in order and the tensors it reads and writes.

As on CUDA, a block of the pool freed during the capture serves a later allocation of the same
capture (the replay runs in the capture's order, as a stream does), so a chain of operations
reserves a few blocks, not one per operation; and two graphs that share a pool must be replayed
in the order they were captured.

Where sim differs from CUDA, and why: a graph keeps the tensors it uses from outside its pool
(parameters, static inputs) alive until reset, where CUDA only records their addresses: freed
sim memory goes back to a cache that other tensors reuse, and a replay must not write there;
the capture error modes ("global", "thread_local", "relaxed") all behave alike, since sim has no
call that is unsafe for other threads; a 0-dim host tensor argument is read at capture, as CUDA
bakes kernel arguments into the graph; the first replay of an out= overload checks that it wrote
in place (the host's mse_loss.out uses its output as scratch space) and replays it as its
functional operator plus a copy if not. Refused, where CUDA captures them: collectives
(torch.distributed's simccl runs them at once on the host through Gloo) and functions compiled by
torch.compile (their C++ kernels read and write sim memory at once; the generated code calls
`torch.sim.refuse_if_capturing` first). Either fails the capture with one line saying so, since a
replay that silently skipped them would give wrong answers; capture eager code and run collectives
between replays.
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
