"""Step 13, compile: `torch.compile` with its default backend, inductor, generates kernels for sim.

sim answers inductor's questions (`torch.sim.Scheduling` and the wrapper classes, asked the first time it compiles)
with inductor's own C++ code generation, run as sim's kernels, and dynamo's (`get_interface_for_device("sim")`) from
the moment dynamo's device-interface module loads, so `import torch` imports neither. Each place where inductor takes
"not the CPU" to mean "a GPU" is corrected where sim overrides it, below; guide page 13 tells the whole story.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torch_sim import device_module

DYNAMO_INTERFACE_MODULE = "torch._dynamo.device_interface"
# Why a graph capture refuses code inductor generated for sim (written by write_launcher_fn_call_get_indent).
COMPILED_CODE_IN_CAPTURE = ("a function compiled by torch.compile runs its C++ kernels on sim memory at once and a "
                            "graph cannot record them; capture the uncompiled code, or call the compiled function "
                            "outside the capture")
INDUCTOR_ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")
COMPILE_INTERFACE = "compile"  # the interface sim's interface trace names calls of the classes below by
# The members of dynamo's DeviceInterface that are functions (its classes, Stream, Event, device and Worker, are
# left out: wrapping them would change what dynamo builds).
DYNAMO_INTERFACE_FUNCTIONS = (
    "is_available", "device_count", "current_device", "set_device", "exchange_device", "maybe_exchange_device",
    "synchronize", "stream", "current_stream", "set_stream", "_set_stream_by_id", "get_raw_stream",
    "get_device_properties", "get_compute_capability", "is_bf16_supported", "is_dtype_supported",
    "memory_allocated", "is_triton_capable", "raise_if_triton_unavailable")
DEVICE_OP_OVERRIDES = ("set_device", "synchronize", "device_guard", "import_get_raw_stream_as", "kernel_header",
                       "kernel_driver", "cpp_device_guard", "cpp_stream_guard")


@functools.cache
def inductor_backend() -> dict[str, type]:
    """Register sim with inductor and dynamo (once) and return the classes inductor asks torch.sim for."""
    from torch._inductor import config
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    class HostKernelCalls:
        """Calls the C++ kernels, compiled for the host CPU, as kernels of sim: each call is launched on the current
        stream of its tensors' device (`torch.sim.run_host_kernel`), runs on the driver's executor after the work
        queued there (where device memory is open even with SIM_MEMORY=discrete), and returns once it ran. Inductor
        writes a C++ kernel's call only for the device type "cpu" ("device sim nyi"), so the call states the host."""

        def generate_kernel_call(self, kernel_name: str, call_args: Any, *, device: Any = None, triton: bool = True,
                                 **options: Any) -> None:
            if not triton:
                device = torch.device("cpu")
                self.__dict__.setdefault("host_kernels", set()).add(kernel_name)
            super().generate_kernel_call(kernel_name, call_args, device=device, triton=triton, **options)

        def wrap_kernel_call(self, name: str, call_args: Any) -> str:
            if name in self.__dict__.get("host_kernels", ()):
                return super().wrap_kernel_call("torch.sim.run_host_kernel", [repr(name), name, *call_args])
            return super().wrap_kernel_call(name, call_args)

    class IndexedAllocations:
        """Allocates each buffer on its own sim device, not on the current one: inductor writes the device's type
        alone and relies on a device guard it writes only for GPU types (`device_need_guard`)."""

        def make_allocation(self, name: str, device: torch.device, dtype: torch.dtype, shape: Any, stride: Any,
                            allocation_shape: Any = None, is_pinned: bool = False) -> str:
            line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
            if device.type != "sim" or device.index is None:
                return line
            return line.replace(f"device='{device.type}'", f"device='{device}'", 1)

    class SimSubgraphWrapperCodegen(HostKernelCalls, IndexedAllocations, SubgraphPythonWrapperCodegen):
        """The wrapper of a subgraph (the branches of torch.cond, the body of a while_loop)."""

    class SimWrapperCodegen(HostKernelCalls, IndexedAllocations, PythonWrapperCodegen):
        """Inductor's Python wrapper, calling the C++ kernels on sim tensors."""

        @staticmethod
        def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: Any,
                   partition_signatures: Any = None) -> PythonWrapperCodegen:
            if is_subgraph:
                return SimSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return SimWrapperCodegen()

        def write_launcher_fn_call_get_indent(self) -> int:
            # A graph capture (step 15) cannot record the host kernels: the generated call refuses one first.
            indent = super().write_launcher_fn_call_get_indent()
            if hasattr(torch.sim, "refuse_if_capturing"):  # graphs (step 15) are installed
                with self.prefix.indent(indent):
                    self.prefix.writeline(f"torch.sim.refuse_if_capturing({COMPILED_CODE_IN_CAPTURE!r})")
            return indent

    class SimScheduling(CppScheduling):
        """Inductor's C++ scheduling, writing each of sim's kernels with the C++ code generator's type rules:
        inductor names the generator of any device but cpu, mps, xpu and tpu after `config.cuda_backend`
        ("triton"), so only sim's own kernels are generated under "cpp" and a CUDA device beside sim keeps Triton."""

        def codegen_node(self, node: Any) -> None:
            with config.patch(cuda_backend="cpp"):
                super().codegen_node(node)

    class SimDeviceOpOverrides(CpuDeviceOpOverrides):
        def set_device(self, device_idx: int) -> str:
            return f"torch.sim.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.sim.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.sim.device({device_idx})"

    device_module.trace_methods(COMPILE_INTERFACE, SimScheduling, ["codegen_node"])
    device_module.trace_methods(COMPILE_INTERFACE, SimWrapperCodegen,
                                ["create", "generate_kernel_call", "wrap_kernel_call", "make_allocation",
                                 "write_launcher_fn_call_get_indent"])
    device_module.trace_methods(COMPILE_INTERFACE, SimDeviceOpOverrides,
                                [name for name in DEVICE_OP_OVERRIDES if hasattr(SimDeviceOpOverrides, name)])
    register_device_op_overrides("sim", SimDeviceOpOverrides())
    register_dynamo_interface()
    # The scheduler's reindexing after fusion skips only "cpu" nodes and fails on C++ kernels' loop groups; a
    # process-wide setting, so a GPU beside sim loses that optimisation.
    config.loop_reindexing_after_fusion = False
    return {"Scheduling": SimScheduling, "PythonWrapperCodegen": SimWrapperCodegen,
            "CppWrapperCodegen": CppWrapperCpu, "WrapperFxCodegen": WrapperFxCodegen}


CODEGEN_TAG_PREFIX = "sim-codegen-"


def codegen_tag() -> str:
    """The tag that names what sim's code generation writes, in the compile caches' keys: this file's version, and
    whether graphs (step 15) are installed, since the generated code then refuses a capture first."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return CODEGEN_TAG_PREFIX + digest + ("-graphs" if hasattr(torch.sim, "refuse_if_capturing") else "")


def tag_compile_caches() -> None:
    """Put sim's code generation into the compile caches' keys, beside any tag the user set: inductor keys its caches
    on torch's sources and settings, so code an older sim generated would otherwise be loaded again."""
    from torch.compiler import config

    kept = [part for part in config.cache_key_tag.split("+") if part and not part.startswith(CODEGEN_TAG_PREFIX)]
    config.cache_key_tag = "+".join([*kept, codegen_tag()])


@functools.cache
def register_dynamo_interface() -> None:
    """Tell dynamo how to ask sim for its devices (once): `get_interface_for_device("sim")` answers from then on."""
    from torch._dynamo.device_interface import CpuInterface, register_interface_for_device

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

    device_module.trace_methods(COMPILE_INTERFACE, SimInterface,
                                [name for name in DYNAMO_INTERFACE_FUNCTIONS if hasattr(SimInterface, name)])
    register_interface_for_device("sim", SimInterface)
    tag_compile_caches()


class _RegisterWhenDynamoLoads(importlib.abc.MetaPathFinder):
    """Registers sim's dynamo interface right after `torch._dynamo.device_interface` runs, wherever it is imported
    from: importing dynamo at `import torch` would cost over a second, and registering later leaves a window in
    which dynamo answers "No interface for device sim"."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != DYNAMO_INTERFACE_MODULE:
            return None
        sys.meta_path.remove(self)  # one module, once: let the usual finders find it
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        register_dynamo_interface()


def register_dynamo_interface_when_it_loads() -> None:
    """Register sim with dynamo now if dynamo's device interfaces are loaded, else the moment they load."""
    if DYNAMO_INTERFACE_MODULE in sys.modules:
        register_dynamo_interface()
    elif not any(isinstance(finder, _RegisterWhenDynamoLoads) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterWhenDynamoLoads())


def dynamo_backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """`torch.compile(..., backend="sim")`: dynamo's graph, run as captured by sim's eager kernels.

    Registered through the `torch_dynamo_backends` entry point (pyproject.toml), read the first time dynamo looks
    a backend name up. It separates the two halves of compiling for a device: dynamo's capture (fake sim tensors,
    guards, the device interface) from inductor's code generation. When the default backend fails on sim and
    this one works, the fault is in code generation. A graph input on another device than sim or the
    CPU is refused, since sim's kernels could not run that graph.
    """
    for node in graph_module.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.Tensor) and value.device.type not in ("sim", "cpu"):
            raise ValueError(f"torch.compile(backend='sim') runs graphs of sim and CPU tensors, but the input "
                             f"{node.target!r} is on {value.device}: move it to sim, or pick a backend for "
                             f"{value.device.type} (the default, inductor, for instance)")
    return graph_module.forward


def _inductor_attribute(name: str) -> type:
    """torch.sim's module __getattr__: inductor's classes for sim, imported on first use."""
    if name in INDUCTOR_ATTRIBUTES:
        runtime = device_module._runtime()
        if runtime.interface_trace_on():  # inductor reads the four the first time it compiles for sim
            runtime.record_interface_call(COMPILE_INTERFACE, name, "")
        return inductor_backend()[name]
    raise AttributeError(f"module 'torch.sim' has no attribute {name!r}")


def run_host_kernel(name: str, kernel: Callable[..., Any], *args: Any) -> None:
    """Run a kernel torch.compile generated for the host as a kernel of sim: launched on the current stream of the
    device of its first sim tensor, on the driver's executor, returning once it ran."""
    device_module._runtime().run_host_kernel(name, kernel, *args)


def install() -> None:
    device_module.export(run_host_kernel, __getattr__=_inductor_attribute)
    register_dynamo_interface_when_it_loads()
