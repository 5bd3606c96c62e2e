"""Speed of the sim backend, as ratios to CPU eager measured in the same run.

Each figure is the median of several repeats (training steps: of 200 single steps, with the
90th percentile printed too). Run: `make benchmark`
(or `python benchmarks/backend_speed.py` in the project's virtualenv).
"""
from __future__ import annotations

from typing import Callable

import torch

from pu1_explorer import workloads
from timing import median_seconds, step_seconds

REPEATS = 7


def multiplies(device: str, size: int, count: int) -> Callable[[], object]:
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def run() -> object:
        for _ in range(count):
            result = a * b
        return result

    return run


def training_step(name: str, device: str, compiled: bool = False) -> Callable[[], object]:
    """One SGD step of a reference workload; with `compiled`, the model runs through torch.compile."""
    workload = workloads.WORKLOADS[name]
    torch.manual_seed(0)
    model = workload.make_model().to(device)
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = workload.make_batch(torch.Generator().manual_seed(0))
    inputs, targets = inputs.to(device), targets.to(device)

    def run() -> object:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return run


def gpt2_training_step(device: str) -> Callable[[], object]:
    """One AdamW step of a small-config Hugging Face GPT-2 (random weights, tied head)."""
    import transformers

    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 128, (4, 32), generator=torch.Generator().manual_seed(0)).to(device)

    def run() -> object:
        optimizer.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        return loss

    return run


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    torch.set_num_threads(torch.get_num_threads())
    rows: list[tuple[str, float, float, str]] = []

    def compare(label: str, make: Callable[[str], Callable[[], object]], target: str) -> None:
        cpu = median_seconds(make("cpu"), REPEATS, warm_up=True)
        sim = median_seconds(make("sim"), REPEATS, warm_up=True)
        rows.append((label, cpu, sim, target))

    compare("1,000 multiplies, 64x64 float32 (per-op overhead)", lambda d: multiplies(d, 64, 1000), "<= 3x")
    compare("100 multiplies, 1024x1024 float32 (bandwidth)", lambda d: multiplies(d, 1024, 100), "<= 1.2x")
    tails = []
    for name, label, target in (("mlp", "small MLP", "<= 2x"), ("cnn", "small CNN", "<= 2x"),
                                ("transformer", "transformer encoder layer", "<= 1.1x")):
        cpu, cpu_tail = step_seconds(training_step(name, "cpu"))
        sim, sim_tail = step_seconds(training_step(name, "sim"))
        rows.append((f"one training step, {label} (median of 200)", cpu, sim, target))
        tails.append((label, cpu_tail, sim_tail))
    cpu, cpu_tail = step_seconds(gpt2_training_step("cpu"))
    sim, sim_tail = step_seconds(gpt2_training_step("sim"))
    rows.append(("one training step, small-config GPT-2 (median of 200)", cpu, sim, "<= 1.1x"))
    tails.append(("GPT-2", cpu_tail, sim_tail))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {REPEATS} repeats\n")
    print(f"| {'workload':62s} | {'CPU eager':>10s} | {'sim':>10s} | {'ratio':>6s} | target |")
    print(f"|{'-' * 64}|{'-' * 12}|{'-' * 12}|{'-' * 8}|--------|")
    for label, cpu, sim, target in rows:
        print(f"| {label:62s} | {cpu * 1e3:7.2f} ms | {sim * 1e3:7.2f} ms | {sim / cpu:5.2f}x | {target} |")

    print("\nslow tail of the training steps (90th percentile): " + "; ".join(
        f"{label} {cpu * 1e3:.2f} ms on CPU, {sim * 1e3:.2f} ms on sim" for label, cpu, sim in tails))

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
