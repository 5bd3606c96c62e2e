"""Device API parity with CUDA: init, capabilities, streams on the current device, pinned slices,
and invalid indices that `except RuntimeError` catches."""
from __future__ import annotations

import pytest
import torch


def test_init_and_capability():
    torch.sim.init()
    capability = torch.accelerator.get_device_capability("sim:1")
    assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= capability["supported_dtypes"]
    with pytest.raises(RuntimeError, match="sim:4 does not exist"):
        torch.accelerator.get_device_capability("sim:4")


def test_a_stream_without_an_index_belongs_to_the_current_device():
    with torch.sim.device(1):
        stream = torch.Stream(device="sim")
        assert stream.device_index == 1 and stream.device == torch.device("sim:1")
    assert torch.Stream(device="sim").device_index == 0


def test_a_slice_of_pinned_memory_is_pinned():
    pinned = torch.arange(16.0).pin_memory()
    assert pinned.untyped_storage()[8:].is_pinned()
    assert pinned[3:].is_pinned()
    assert not torch.arange(16.0).untyped_storage()[8:].is_pinned()


@pytest.mark.parametrize("action", [lambda: torch.ones(1, device="sim:9"), lambda: torch.sim.set_device(9),
                                    lambda: torch.accelerator.set_device_index(9)])
def test_an_invalid_index_is_a_runtime_error_with_a_clear_message(action):
    with pytest.raises(RuntimeError, match="sim:9 does not exist: this process has 2 sim device"):
        action()


def test_the_capability_lists_no_dtype_sim_cannot_hold():
    quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
    supported = torch.accelerator.get_device_capability("sim:0")["supported_dtypes"]
    assert not quantized & set(supported)
    with pytest.raises(RuntimeError):
        torch.empty(2, dtype=torch.qint8, device="sim")  # what the capability leaves out, sim cannot hold
