"""Small reference models (MLP, CNN, transformer encoder layer) and their training steps.

The explorer's reference workload (`pu1_explorer report`), sim's demo, the tests and the benchmarks use
these, so "the small CNN" means the same model everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10))


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


class SmallTransformer(nn.Module):
    """Token embedding, one encoder layer, mean pooling and a classifier."""

    def __init__(self, vocabulary: int = 100, width: int = 32, heads: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.encoder = nn.TransformerEncoderLayer(width, heads, dim_feedforward=64, dropout=dropout,
                                                  batch_first=True)
        self.classifier = nn.Linear(width, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encoder(self.embedding(tokens)).mean(dim=1))


@dataclass
class Workload:
    name: str
    make_model: Callable[[], nn.Module]
    make_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def _image_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 3, 16, 16, generator=generator), torch.randint(0, 10, (8,), generator=generator)


def _vector_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(32, 64, generator=generator), torch.randint(0, 10, (32,), generator=generator)


def _token_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 100, (8, 12), generator=generator), torch.randint(0, 10, (8,), generator=generator)


WORKLOADS: dict[str, Workload] = {
    "mlp": Workload("mlp", small_mlp, _vector_batch),
    "cnn": Workload("cnn", small_cnn, _image_batch),
    "transformer": Workload("transformer", SmallTransformer, _token_batch),
}


def train(name: str, device: str | torch.device, steps: int = 3, seed: int = 0,
          optimizer: str = "adam") -> tuple[list[float], nn.Module]:
    """Fit a reference model to one fixed batch for a few steps on `device`.

    The same seed gives the same run on any device, so losses and weights can be
    compared with CPU; that is also why the reference models have no dropout
    (each device draws from its own generator).
    """
    workload = WORKLOADS[name]
    torch.manual_seed(seed)
    model = workload.make_model().to(device)
    make_optimizer = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer]
    opt = make_optimizer(model.parameters(), lr=1e-2)
    inputs, targets = workload.make_batch(torch.Generator().manual_seed(seed))
    inputs, targets = inputs.to(device), targets.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model
