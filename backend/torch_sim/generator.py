"""Step 7, generator: `torch.Generator(device="sim")` and per-device default generators.

Each device generator carries a host Mersenne-Twister state; random operators on
sim draw from it (the fallback and native kernels hand it to the host kernel),
so the same seed gives the same numbers, and the state can be saved and restored.
"""
from __future__ import annotations

from typing import Any

import torch

from torch_sim.device_module import _device_index, device_count, export
from torch_sim.runtime import load_runtime


def default_generator(device: Any = None) -> torch.Generator:
    return load_runtime().default_generator(_device_index(device))


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the default generator of every sim device."""
    for index in range(device_count()):
        default_generator(index).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    for index in range(device_count()):
        default_generator(index).seed()


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device: Any = "sim") -> torch.Tensor:
    """The default generator's state as a CPU uint8 tensor."""
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "sim") -> None:
    """Restore a state returned by get_rng_state; a state of the wrong size is refused."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("set_rng_state expects the uint8 CPU tensor that get_rng_state returned")
    default_generator(device).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def install() -> None:
    load_runtime().install_generator()
    export(default_generator, manual_seed, manual_seed_all, seed, seed_all, initial_seed, get_rng_state,
           set_rng_state, get_rng_state_all, set_rng_state_all)
