"""Speed of the sim backend, as ratios to CPU eager measured in the same run.

Every row times sim and the CPU as users run them, by timing.py's `alternating`: each device alone in a fresh
process with PyTorch's defaults (sim's backward on autograd's device thread), the two taking turns after a warm-up,
the median of the round medians with their spread. Run: `make benchmark` (or `python benchmarks/backend_speed.py`
in the project's virtualenv); `--memory discrete` times sim with SIM_MEMORY=discrete, against the same CPU rows.
A full table (without `--rows`) ends with processor_placement.py's measurement before and after the rows: how fast the
machine handed work between processors then, which the per-operator rows depend on.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import torch

from pu1_explorer import workloads
from timing import METHOD, Timing, Work, sim_against_cpu


def multiplies(device: str, size: int, count: int) -> Callable[[], object]:
    """`count` multiplies of two size x size float32 tensors: per-op overhead when small, bandwidth when large."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def run() -> object:
        for _ in range(count):
            result = a * b
        return result

    return run


def matrix_products(device: str, size: int, count: int) -> Callable[[], object]:
    """`count` products of two size x size float32 matrices, each independent of the others."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def run() -> object:
        for _ in range(count):
            result = a @ b
        return result

    return run


def absolute_values(device: str, size: int = 64, count: int = 1000) -> Callable[[], object]:
    """`count` absolute values of a size x size float32 tensor: sim serves `aten::abs` through its boxed route
    (a host kernel called on device memory through the boxed stack), where the multiply has a direct kernel."""
    a = torch.randn(size, size, device=device)

    def run() -> object:
        for _ in range(count):
            result = a.abs()
        return result

    return run


def small_operations(device: str, count: int = 100) -> Callable[[], object]:
    """`count` rounds of small element-wise, reduction and view operations on 32x32 tensors (per-op overhead)."""
    x = torch.randn(32, 32, device=device)
    y = torch.randn(32, 32, device=device)

    def run() -> object:
        for _ in range(count):
            z = (x + y).relu()
            total = z.sum() + z.mean(dim=0).amax()
            flat = z.t().reshape(-1)[5:300]
            picked = torch.where(x > 0, x, y * 2).exp()
        return total, flat, picked

    return run


def recurrent_training_step(kind: str, device: str) -> Callable[[], object]:
    """One AdamW step of a 2-layer nn.LSTM, nn.GRU or nn.RNN (batch 16, 20 steps, width 32 -> 64) with a linear head."""
    torch.manual_seed(0)
    layers = getattr(torch.nn, kind)(input_size=32, hidden_size=64, num_layers=2, batch_first=True).to(device)
    head = torch.nn.Linear(64, 10).to(device)
    optimizer = torch.optim.AdamW([*layers.parameters(), *head.parameters()], lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(16, 20, 32, generator=generator).to(device)
    targets = torch.randint(0, 10, (16,), generator=generator).to(device)

    def run() -> object:
        optimizer.zero_grad()
        outputs, _ = layers(inputs)
        loss = torch.nn.functional.cross_entropy(head(outputs[:, -1]), targets)
        loss.backward()
        optimizer.step()
        return loss

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


def hugging_face_training_step(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                               device: str) -> Callable[[], object]:
    """One AdamW step of a Hugging Face model on `batch` (the model computes its own loss from the batch's labels)."""
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = {key: value.to(device) for key, value in batch.items()}

    def run() -> object:
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        return loss

    return run


def gpt2_training_step(device: str) -> Callable[[], object]:
    """One AdamW step of a small-config Hugging Face GPT-2 (random weights, tied head)."""
    import transformers

    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    tokens = torch.randint(0, 128, (4, 32), generator=torch.Generator().manual_seed(0))
    return hugging_face_training_step(transformers.GPT2LMHeadModel(config), {"input_ids": tokens, "labels": tokens},
                                      device)


def bert_training_step(device: str) -> Callable[[], object]:
    """One AdamW step of a small-config Hugging Face BERT classifying sequences (random weights)."""
    import transformers

    config = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=32, num_labels=4)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(0, 128, (4, 32), generator=generator),
             "labels": torch.randint(0, 4, (4,), generator=generator)}
    return hugging_face_training_step(transformers.BertForSequenceClassification(config), batch, device)


def vit_training_step(device: str) -> Callable[[], object]:
    """One AdamW step of a small-config Hugging Face ViT classifying 32x32 images (random weights)."""
    import transformers

    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=128, num_labels=10)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    batch = {"pixel_values": torch.randn(4, 3, 32, 32, generator=generator),
             "labels": torch.randint(0, 10, (4,), generator=generator)}
    return hugging_face_training_step(transformers.ViTForImageClassification(config), batch, device)


OPTIMIZERS = {"AdamW": torch.optim.AdamW, "Adam": torch.optim.Adam, "SGD": torch.optim.SGD}


def optimizer_step(name: str, implementation: str, device: str, count: int = 20,
                   size: int = 128) -> Callable[[], object]:
    """One step of an optimizer (`foreach` or `fused`) over `count` parameters of `size`x`size` with fixed
    gradients."""
    generator = torch.Generator().manual_seed(0)
    parameters = [torch.randn(size, size, generator=generator).to(device).requires_grad_() for _ in range(count)]
    for parameter in parameters:
        parameter.grad = torch.randn(size, size, generator=generator).to(device)
    options = {"momentum": 0.9} if name == "SGD" else {}
    optimizer = OPTIMIZERS[name](parameters, lr=1e-3, **{implementation: True}, **options)

    def run() -> object:
        optimizer.step()
        return parameters[0]

    return run


def device_copies(device: str, size: int = 1024, count: int = 100) -> Callable[[], object]:
    """`count` copies of a size x size float32 tensor into another one on the same device (`copy_`)."""
    source = torch.randn(size, size, device=device)
    destination = torch.empty(size, size, device=device)

    def run() -> object:
        for _ in range(count):
            destination.copy_(source)
        return destination

    return run


PLACEMENT = Path(__file__).with_name("processor_placement.py")


def placement_lines() -> list[str]:
    """One measurement by processor_placement.py, its table's header and row: the state the machine was in, whose
    handover between processors the per-operator rows depend on."""
    result = subprocess.run([sys.executable, str(PLACEMENT), "--repeat", "1"], capture_output=True, text=True,
                            cwd=PLACEMENT.parent)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or len(lines) < 3:
        raise SystemExit(f"backend_speed.py: processor_placement.py failed:\n{result.stdout}{result.stderr}")
    return lines[-3:]


# a boxed operator's own cost before the asynchronous device was about 600 ns (RESULTS.md, per-op profile); the goal
# is half of it
BOXED_TARGET_NS = 300


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", choices=("unified", "discrete"), default="unified",
                        help="sim's device memory (SIM_MEMORY) in the sim processes; default: unified")
    parser.add_argument("--rows", default="", metavar="TEXT",
                        help="only the rows whose workload names TEXT (e.g. 'parameters of 128x128')")
    arguments = parser.parse_args()
    memory = arguments.memory
    os.environ["SIM_MEMORY"] = memory  # the worker processes inherit it; the CPU's never touch sim
    rows: list[tuple[str, Timing | None, Timing | None, str]] = []  # None: not measured (--rows)
    placement = [] if arguments.rows else placement_lines()  # a full table is framed by the machine's state

    def compare(label: str, work: Work, target: str, **options: int) -> None:
        if arguments.rows not in label:
            rows.append((label, None, None, target))
            return
        cpu, sim = sim_against_cpu(work, **options)
        rows.append((label, cpu, sim, target if memory == "unified" else "<= 2x"))
        print(f"  measured: {label}", flush=True)

    few = {"calls": 5}  # a call of these rows is itself a loop of many operations
    compare("1,000 multiplies, 64x64 float32 (per-op overhead)",
            Work("backend_speed", "multiplies", {"size": 64, "count": 1000}), "<= 1.1x", **few)
    direct_row = rows[-1]
    compare("1,000 absolute values, 64x64 float32 (per-op overhead of a boxed kernel)",
            Work("backend_speed", "absolute_values", {"count": 1000}), "<= 1.1x", **few)
    boxed_row = rows[-1]
    compare("100 rounds of 10 small element-wise, reduction and view ops (per-op overhead)",
            Work("backend_speed", "small_operations"), "<= 1.1x", **few)
    compare("100 multiplies, 1024x1024 float32 (bandwidth)",
            Work("backend_speed", "multiplies", {"size": 1024, "count": 100}), "<= 1.05x", **few)
    for name, label in (("mlp", "small MLP"), ("cnn", "small CNN"), ("transformer", "transformer encoder layer")):
        compare(f"one training step, {label} (SGD)", Work("backend_speed", "training_step", {"name": name}), "<= 1.1x")
    compare("100 device-to-device copies, 1024x1024 float32 (copy_)", Work("backend_speed", "device_copies"),
            "<= 1.1x", **few)
    for model in ("GPT-2", "BERT", "ViT"):
        compare(f"one training step, small-config {model} (Hugging Face, AdamW)",
                Work("backend_speed", f"{model.replace('-', '').lower()}_training_step"), "<= 1.1x")
    for kind in ("LSTM", "GRU", "RNN"):
        compare(f"one training step, 2-layer nn.{kind} (AdamW)",
                Work("backend_speed", "recurrent_training_step", {"kind": kind}), "<= 1.1x")
    for name in OPTIMIZERS:
        for implementation in ("foreach", "fused"):
            compare(f"one {name} step, {implementation}=True, 20 parameters of 128x128",
                    Work("backend_speed", "optimizer_step", {"name": name, "implementation": implementation}),
                    "<= 1.1x")
    compare("one AdamW step, foreach=True, 400 parameters of 16x16 (a model's many tensors)",
            Work("backend_speed", "optimizer_step", {"name": "AdamW", "implementation": "foreach", "count": 400,
                                                     "size": 16}), "<= 1.1x")

    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} threads, sim memory {memory}; {METHOD} "
          f"(the rows of 100 or 1,000 operations: {few['calls']} calls a round)\n")
    print(f"| {'workload':78s} | {'CPU eager, ms (spread)':>24s} | {'sim, ms (spread)':>24s} | ratio | target |")
    print(f"|{'-' * 80}|{'-' * 26}:|{'-' * 26}:|------:|--------|")
    for label, cpu, sim, target in rows:
        if cpu is None:
            continue
        print(f"| {label:78s} | {cpu.milliseconds():>24s} | {sim.milliseconds():>24s} | {sim.ratio_to(cpu):4.2f}x | {target} |")
    if placement:
        print("\nthe machine before and after the rows: sim's 1,000 multiplies of 64x64 in one process with the "
              "launching thread and the executor placed three ways (benchmarks/processor_placement.py)")
        print("\n".join([*placement, placement_lines()[-1]]))
    if direct_row[1] is None or boxed_row[1] is None:
        return 0
    direct, boxed = ((sim.median - cpu.median) / 1000 * 1e9 for _, cpu, sim, _ in (direct_row, boxed_row))
    print(f"\nsim's own time an operator (sim minus CPU, over 1,000 calls): a direct kernel (multiply) {direct:.0f} ns, "
          f"a boxed kernel (abs) {boxed:.0f} ns (target for the boxed route: at most {BOXED_TARGET_NS} ns)")
    (_, cpu_direct, sim_direct, _), (_, cpu_boxed, sim_boxed, _) = direct_row, boxed_row
    print("the launching thread's processor time an operator (before it waits for the device; over 1,000 calls): "
          f"a multiply {cpu_direct.launching / 1000 * 1e9:.0f} ns on the CPU, {sim_direct.launching / 1000 * 1e9:.0f} ns "
          f"on sim; an abs {cpu_boxed.launching / 1000 * 1e9:.0f} ns on the CPU, "
          f"{sim_boxed.launching / 1000 * 1e9:.0f} ns on sim")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
