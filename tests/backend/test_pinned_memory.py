"""Pinned host memory through the hooks' pinned-memory allocator."""
import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_and_is_pinned():
    host = torch.randn(64)
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned, host)
    on_device = pinned.to("sim", non_blocking=True)
    assert torch.equal(on_device.cpu(), host)


def test_dataloader_pins_its_batches():
    dataset = TensorDataset(torch.randn(10, 3), torch.arange(10))
    loader = DataLoader(dataset, batch_size=4, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 3
    assert all(tensor.is_pinned() for batch in batches for tensor in batch)


def test_sim_tensors_cannot_be_pinned():
    import pytest

    with pytest.raises(RuntimeError, match="pin"):
        torch.empty(3, device="sim", pin_memory=True)
