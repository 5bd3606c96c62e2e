"""Step 13, compile: `torch.compile` with its default backend, inductor, generates kernels for sim.

Dynamo captures graphs of sim tensors as of any device; inductor then needs, per device, a
scheduling (which kernels to write), a wrapper (the Python that allocates buffers and calls
them) and device op overrides (how the wrapper sets the device and synchronizes). Inductor
asks the device module for the first two (`torch.sim.Scheduling`, `torch.sim.PythonWrapperCodegen`,
`torch.sim.CppWrapperCodegen`, `torch.sim.WrapperFxCodegen`: all four, or it ignores them) the
first time it compiles; sim answers then, so `import torch`
never pays for importing inductor. sim memory is host memory, so sim uses inductor's own C++ CPU
code generation: the kernels it writes read and write sim memory directly.

Three places in inductor treat "not the CPU" as "a GPU", and sim works around each:
- the wrapper writes calls to C++ kernels only for the device type "cpu"
  (`_generate_kernel_call_helper` raises "device sim nyi"), so sim's wrapper writes them itself;
- the scheduler's loop reindexing after fusion skips only nodes whose device type is "cpu"
  (`_try_reindex_pointwise_for_reduction`) and fails on C++ kernels' loop groups, so the first
  compile turns `torch._inductor.config.loop_reindexing_after_fusion` off;
- `get_current_backend()` names the code generator of any device but cpu, mps, xpu and tpu
  after `config.cuda_backend` ("triton"), so C++ kernels with indirect indexing (an embedding)
  get Triton's type rules and fail. When the process has no CUDA device, the first compile sets
  `config.cuda_backend = "cpp"`; beside a CUDA device it cannot, and such kernels fail on sim.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from torch_sim import device_module

INDUCTOR_ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


@functools.cache
def inductor_backend() -> dict[str, type]:
    """Register sim with inductor and dynamo (once) and return the classes inductor asks torch.sim for."""
    from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
    from torch._inductor import config
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    class SimWrapperCodegen(PythonWrapperCodegen):
        """Inductor's Python wrapper, which also writes the calls of C++ kernels for sim."""

        @staticmethod
        def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: Any,
                   partition_signatures: Any = None) -> PythonWrapperCodegen:
            if is_subgraph:
                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return SimWrapperCodegen()

        def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, triton: bool = True, **options):
            if triton:
                return super()._generate_kernel_call_helper(kernel_name, call_args, triton=triton, **options)
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))

    class SimDeviceOpOverrides(CpuDeviceOpOverrides):
        def set_device(self, device_idx: int) -> str:
            return f"torch.sim.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.sim.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.sim.device({device_idx})"

    class SimInterface(CpuInterface):
        """What dynamo asks a device: sim's devices, as torch.sim counts them."""

        @staticmethod
        def is_available() -> bool:
            return torch.sim.is_available()

        @staticmethod
        def device_count() -> int:
            return torch.sim.device_count()

        @staticmethod
        def current_device() -> int:
            return torch.sim.current_device()

        @staticmethod
        def set_device(device: Any) -> None:
            torch.sim.set_device(device)

        @staticmethod
        def synchronize(device: Any = None) -> None:
            torch.sim.synchronize(device)

    register_device_op_overrides("sim", SimDeviceOpOverrides())
    register_interface_for_device("sim", SimInterface)
    config.loop_reindexing_after_fusion = False
    if not torch.cuda.is_available():
        config.cuda_backend = "cpp"
    return {"Scheduling": CppScheduling, "PythonWrapperCodegen": SimWrapperCodegen,
            "CppWrapperCodegen": CppWrapperCpu, "WrapperFxCodegen": WrapperFxCodegen}


def _inductor_attribute(name: str) -> type:
    """torch.sim's module __getattr__: inductor's classes for sim, imported on first use."""
    if name in INDUCTOR_ATTRIBUTES:
        return inductor_backend()[name]
    raise AttributeError(f"module 'torch.sim' has no attribute {name!r}")


def install() -> None:
    device_module.export(__getattr__=_inductor_attribute)
