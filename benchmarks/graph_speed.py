"""Replaying a captured graph on sim against running the same work eagerly on sim, in the same run.

Two workloads: 1,000 multiplies of 64×64 float32 tensors (per-kernel overhead, goal: replay at
most 0.5× eager) and one training step of the reference small MLP with SGD and momentum (goal: at
most 0.7× eager). Both are timed by the repository's one method (timing.interleaved: warm-up,
rounds in rotating order, the median of the round medians with their spread). Run: `make benchmark` (or
`python benchmarks/graph_speed.py` in the project's virtualenv).
"""
from __future__ import annotations

from typing import Callable

import torch

from pu1_explorer import workloads
from timing import INTERLEAVED_METHOD, interleaved

MULTIPLIES = 1000


def multiply_chain(tensor: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    for _ in range(MULTIPLIES):
        tensor = tensor * factor
    return tensor


def multiplies_pair() -> tuple[Callable[[], object], Callable[[], object]]:
    """Eager multiplies and a graph of the same multiplies, on the same inputs."""
    start = torch.randn(64, 64, device="sim")
    factor = torch.full((64, 64), 1.0001, device="sim")
    graph = torch.accelerator.Graph()
    with torch.Stream(device="sim"), graph:
        multiply_chain(start, factor)
    return (lambda: multiply_chain(start, factor)), graph.replay


def mlp_step_pair() -> tuple[Callable[[], object], Callable[[], object]]:
    """An eager small-MLP training step and a graph of one, captured as PyTorch's whole-network recipe does."""

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = workloads.small_mlp().to("sim")
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    inputs = torch.randn(32, 64, device="sim")
    targets = torch.randint(0, 10, (32,), device="sim")
    eager_model, eager_optimizer = make()

    def eager_step() -> object:
        eager_optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(eager_model(inputs), targets).backward()
        eager_optimizer.step()

    model, optimizer = make()
    side = torch.Stream(device="sim")
    with side:
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    graph = torch.accelerator.Graph()
    with side, graph:
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    return eager_step, graph.replay


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {INTERLEAVED_METHOD}")
    print(f"{'workload':<44} {'eager on sim':>26} {'replay':>26} {'ratio':>7} goal")
    for name, (eager, replay), goal in (
        (f"{MULTIPLIES:,} multiplies, 64x64 float32", multiplies_pair(), 0.5),
        ("one training step, small MLP (SGD momentum)", mlp_step_pair(), 0.7),
    ):
        timings = interleaved({"eager": eager, "replay": replay})
        ratio = timings["replay"].ratio_to(timings["eager"])
        verdict = "met" if ratio <= goal else "missed"
        print(f"{name:<44} {timings['eager'].milliseconds():>26} {timings['replay'].milliseconds():>26} "
              f"{ratio:>6.2f}x <= {goal}x ({verdict})")


if __name__ == "__main__":
    main()
