"""Step 8, autograd: keep PyTorch's derivative formulas, and override one where the device differs.

PyTorch's own derivative formulas are registered for every Autograd<Backend> key
through the Autograd alias, so training works on sim without any registration.
A vendor overrides `AutogradPrivateUse1` when its device computes an operator's
gradient differently (a fused kernel, say). The worked example here does that
for `aten::silu`: a `torch.autograd.Function` whose forward is the device's silu
kernel and whose backward is the device's fused `silu_backward` kernel.

An own derivative must keep the reference's arithmetic where the device promises
results bit-identical to the CPU: an earlier version of this example saved the
sigmoid and built the gradient from it, which differs from the CPU's fused kernel
in the last bit, and the OpInfo sweep (tests/backend/test_device_generic.py) caught it.

The recurrent layers (`aten::lstm`, `gru`, `rnn_*` and their cells) get an AutogradPrivateUse1
kernel too (backend/torch_sim/csrc/operators_rnn.cpp): the host's autograd records the CPU's own graph for
the whole sequence, and one sim node runs its backward, instead of a graph of small per-step
operators. Training is then bit-identical to the CPU and as fast.
"""
from __future__ import annotations

import atexit
import time

import torch

from torch_sim.operators import RECURRENT_OPERATORS
from torch_sim.runtime import load_runtime

_library: torch.library.Library | None = None


def _record(method: str) -> None:
    """One call of autograd's into sim's Function in the interface trace, as SIM_TRACE records a C++ method."""
    runtime = load_runtime()
    if runtime.interface_trace_on():
        runtime.record_interface_call("autograd", method, "aten::silu")


def _below_autograd(keyset: torch.DispatchKeySet) -> torch.DispatchKeySet:
    """The keys left for silu's next kernel: the call goes on to sim's own (PrivateUse1) kernel."""
    return keyset.remove(torch.DispatchKey.AutogradPrivateUse1)


class _SiluOnDeviceKernels(torch.autograd.Function):
    @staticmethod
    def forward(context, keyset: torch.DispatchKeySet, input: torch.Tensor) -> torch.Tensor:
        _record("forward")
        output = torch.ops.aten.silu.default.redispatch(_below_autograd(keyset), input)
        context.save_for_backward(input)
        return output

    @staticmethod
    def backward(context, grad_output: torch.Tensor) -> tuple[None, torch.Tensor]:
        _record("backward")
        (input,) = context.saved_tensors
        return None, torch.ops.aten.silu_backward.default(grad_output, input)


def silu_autograd_kernel(keyset: torch.DispatchKeySet, input: torch.Tensor) -> torch.Tensor:
    """The AutogradPrivateUse1 kernel of aten::silu on sim: the autograd.Function only when a gradient is needed."""
    if not (torch.is_grad_enabled() and input.requires_grad):
        return torch.ops.aten.silu.default.redispatch(_below_autograd(keyset), input)
    return _SiluOnDeviceKernels.apply(keyset, input)


def _let_autograd_threads_finish() -> None:
    """Give the autograd engine's device threads the GIL before the interpreter shuts down.

    Backward on sim runs on the engine's device thread. torch 2.13 keeps a Python
    object in every backward's thread-local state, which that thread drops after
    the backward has returned; if the interpreter is already finalizing, dropping it
    ends the process with "terminate called without an active exception". A short
    sleep at exit lets the thread finish first.
    """
    for _ in range(4):
        time.sleep(0.005)


def install() -> None:
    global _library
    atexit.register(_let_autograd_threads_finish)
    _library = torch.library.Library("aten", "IMPL")
    _library.impl("silu", silu_autograd_kernel, "AutogradPrivateUse1", with_keyset=True)
    load_runtime().install_recurrent_autograd(list(RECURRENT_OPERATORS))
