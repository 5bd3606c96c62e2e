"""Speed of the dispatcher tracer: traced runs against untraced ones.

Run: `make benchmark` (or `python benchmarks/trace_speed.py` in the project's virtualenv).
Every ratio compares figures measured in this run; nothing here asserts.

- entering (and leaving) the tracer, cold (first trace of the process) and warm;
- a small MLP forward+backward on sim, traced vs untraced (target <= 2x);
- a training step of a small random-weight Hugging Face GPT-2 on sim, traced and then drawn with
  the explorer's trace figure, as the dispatch widget does (target <= 5 s in all).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from timing import median_seconds, mlp_step
from pu1_explorer.tracer import Tracer, trace
from pu1_explorer.widgets.base import figure_html
from pu1_explorer.widgets.figures import trace_figure

STEPS = 10


def gpt2_step(device: str) -> Callable[[], object]:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # the small config's token ids outside the vocabulary do not matter here
    torch.manual_seed(0)
    torch.__future__.set_swap_module_params_on_conversion(True)  # keeps lm_head tied to wte on sim
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=64)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens = torch.randint(0, 500, (2, 16), device=device)

    def run() -> object:
        loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return run


def enter_and_leave() -> None:
    tracer = Tracer("sim")
    tracer.install()
    tracer.uninstall()


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    started = time.perf_counter()
    enter_and_leave()
    cold = time.perf_counter() - started
    warm = median_seconds(enter_and_leave)
    print(f"entering (and leaving) the tracer: {cold:.3f} s cold, {warm:.3f} s warm (target <= 0.2 s)")

    step = mlp_step("sim")
    for _ in range(3):
        step()
    plain, traced, hops = _interleaved(step)
    print(f"small MLP forward+backward on sim ({hops:.0f} hops per step): {plain * 1e3:.2f} ms untraced, "
          f"{traced * 1e3:.2f} ms traced ({traced / plain:.2f}x, target <= 2x)")
    whole = median_seconds(lambda: _traced_once(step))
    print(f"  one step in its own `with trace('sim')` block (entering, leaving, building the hops): "
          f"{whole * 1e3:.1f} ms")

    train = gpt2_step("sim")
    train()
    plain_gpt2 = median_seconds(train, repeats=3)
    started = time.perf_counter()
    with trace("sim") as recorded:
        train()
    traced_at = time.perf_counter()
    html = figure_html(trace_figure(recorded))
    drawn_at = time.perf_counter()
    print(f"GPT-2 (2 layers, 64 wide, batch 2 x 16) training step on sim: {plain_gpt2:.3f} s untraced; traced "
          f"{traced_at - started:.3f} s ({len(recorded.hops)} hops), drawn {drawn_at - traced_at:.3f} s "
          f"({len(html) / 1e6:.1f} MB of HTML); {drawn_at - started:.2f} s in all (target <= 5 s)")
    return 0


def _interleaved(step: Callable[[], object], repeats: int = 5) -> tuple[float, float, float]:
    """Median seconds per step untraced and traced, measured in turns (so that a busy machine slows both
    alike), and the hops per step."""
    timings: dict[str, list[float]] = {"plain": [], "traced": []}
    hops = 0.0
    for _ in range(repeats):
        for mode in timings:
            tracer = None if mode == "plain" else Tracer("sim")
            if tracer is not None:
                tracer.install()
            try:
                step()
                started = time.perf_counter()
                for _ in range(STEPS):
                    step()
                timings[mode].append((time.perf_counter() - started) / STEPS)
            finally:
                if tracer is not None:
                    tracer.uninstall()
            if tracer is not None:
                hops = len(tracer.trace.hops) / (STEPS + 1)
    plain, traced = (statistics.median(values) for values in timings.values())
    return plain, traced, hops


def _traced_once(step: Callable[[], object]) -> None:
    with trace("sim"):
        step()


if __name__ == "__main__":
    raise SystemExit(main())
