"""Step 1, device module: rename PrivateUse1 to `sim` and register `torch.sim`.

`torch.sim` is this module. It starts with the device basics; every later step
adds its own functions to it (memory statistics, streams, seeds, autocast), the
way a vendor's `torch.<device>` grows during a bring-up.

PyTorch calls `torch.sim._lazy_init()` once, before the first tensor reaches the device. After it,
a process that forks gives its child a device it must not use: a real driver's context does not
survive fork(), and neither does the executor thread of sim's driver, so CUDA marks such a child "in
a bad fork" and refuses to start there, and so does sim (`torch.sim._is_in_bad_fork()`). Code that
works on sim then also works on a real device: workers that use the device are started with 'spawn'.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
import threading
from typing import Any, Callable, Sequence

import torch

import torch_sim

NAME = "sim"


def _runtime():
    from torch_sim.runtime import load_runtime

    return load_runtime()


_started = False  # _lazy_init ran in this process


def is_available() -> bool:
    """True once the runtime (the hooks step) is installed and there is at least one device."""
    return "hooks" in torch_sim.installed_steps() and _runtime().device_count() > 0


def is_initialized() -> bool:
    """True once the device has started in this process (PyTorch called `_lazy_init`, before the first tensor or
    storage reached it) and was not inherited through a fork, as torch.cuda.is_initialized() answers."""
    return _started and not _is_in_bad_fork()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the device started in its parent: the child must not use the device."""
    return "hooks" in torch_sim.installed_steps() and _runtime().in_bad_fork()


def _lazy_init() -> None:
    """PyTorch calls this before it first touches the device, and counts the device as started once it returns.

    Like CUDA's, it fails while the runtime cannot start (before the hooks step): a device counted as started
    without its hooks and host allocator crashes torch.accelerator.empty_host_cache(). Like CUDA's, it also fails
    in a child forked after the device started: a real device's driver context does not survive fork(), nor does
    the executor thread of sim's driver, so the child must start the device afresh (multiprocessing's 'spawn').
    """
    torch_sim.require("hooks")
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize sim in forked subprocess. To use sim with multiprocessing, you must use the "
            "'spawn' start method (the parent had already started sim when it forked)"
        )
    global _started
    _runtime().poison_forks()
    _started = True


def device_count() -> int:
    """How many sim devices this process has (SIM_DEVICE_COUNT, default 2)."""
    return _runtime().device_count() if "hooks" in torch_sim.installed_steps() else 0


def _device_index(device: Any = None, optional: bool = True) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != NAME:
            raise ValueError(f"expected a sim device, got {device}")
        index = current_device() if device.index is None else device.index
    if not 0 <= index < device_count():
        raise RuntimeError(  # PyTorch's own wording first, then sim's advice
            f"The device index is out of range. It must be in [0, {device_count()}), but got {index}. "
            f"sim:{index} does not exist: this process has {device_count()} sim device(s). "
            "Use a smaller index or set SIM_DEVICE_COUNT before the backend starts."
        )
    return index


def init() -> None:
    """Initialize sim, like torch.cuda.init(): the runtime is ready once the hooks step is installed."""
    torch_sim.require("hooks")
    _lazy_init()


def current_device() -> int:
    torch_sim.require("guard")
    return _runtime().current_device()


def set_device(device: Any) -> None:
    """Make `device` the current sim device of this thread."""
    torch_sim.require("guard")
    _runtime().set_device(_device_index(device))


def synchronize(device: Any = None) -> None:
    """Wait until every stream of the device has run the work queued on it; refused while a stream of the device
    captures a graph (as CUDA does)."""
    index = _device_index(device)
    _runtime().refuse_synchronize_while_capturing(index)
    _runtime().synchronize_device(index)


class device:
    """Context manager that makes a sim device current, like torch.cuda.device."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else _device_index(device)
        self.previous = -1

    def __enter__(self) -> None:
        if self.index >= 0:
            self.previous = current_device()
            set_device(self.index)

    def __exit__(self, *exc_info: Any) -> None:
        if self.index >= 0:
            set_device(self.previous)


def get_device_name(device: Any = None) -> str:
    return f"Simulated accelerator {_device_index(device)}"


def _package_folder(module: Any) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


DEVICE_MODULE_INTERFACE = "device_module"  # the interface the trace names calls of this module's functions by
_NOT_TRACED = frozenset({"start_interface_trace", "stop_interface_trace", "export", "install", "trace_methods"})
_untraced: dict[str, Any] = {}  # while a trace is on: each traced name -> what it was before
_traced_depth = threading.local()  # calls the module's functions make into each other are not PyTorch's
_traced_methods: list[tuple[str, type, tuple[str, ...]]] = []  # (interface, class, method names), trace_methods
_untraced_methods: list[tuple[type, str, Any]] = []  # while a trace is on: (class, name, its own attribute or None)


def _arguments_text(args: tuple, kwargs: dict) -> str:
    text = ", ".join([repr(argument) for argument in args] + [f"{key}={value!r}" for key, value in kwargs.items()])
    return text if len(text) <= 120 else text[:117] + "..."


def _recording(name: str, function: Callable, method: bool = False, record: bool = True,
               interface: str = DEVICE_MODULE_INTERFACE) -> Callable:
    """`function`, recording each outermost call as a call of `interface`'s `name` (a `method`'s first argument,
    the instance, left out of the record); with `record` False it only keeps its inner calls out. A call of
    another interface than the device module's also records when PyTorch code makes it inside an outer one (an
    inductor method sim overrides calls back into sim's wrapper)."""
    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_traced_depth, "value", 0)
        from_pytorch = (interface != DEVICE_MODULE_INTERFACE
                        and not inspect.currentframe().f_back.f_code.co_filename.startswith(_package_folder(torch_sim)))
        if (depth == 0 or from_pytorch) and record:
            shown = args[1:] if method else args
            _runtime().record_interface_call(interface, name, _arguments_text(shown, kwargs))
        _traced_depth.value = depth + 1
        try:
            return function(*args, **kwargs)
        finally:
            _traced_depth.value = depth

    return recorded


def traced_functions() -> dict[str, Any]:
    """The functions and classes of torch.sim the trace records: sim's public ones (each step exports its own), and
    the private ones PyTorch looks up on a device module as it does on torch.cuda (`_lazy_init`, `_is_in_bad_fork`)."""
    return {name: value for name, value in vars(sys.modules[__name__]).items()
            if callable(value) and getattr(value, "__module__", "").startswith("torch_sim") and name not in _NOT_TRACED
            and (not name.startswith("_") or hasattr(torch.cuda, name))}


def _record_device_module_calls() -> None:
    module = sys.modules[__name__]
    for name, value in traced_functions().items():
        if isinstance(value, type):  # a class stays itself (isinstance works); its constructor records
            methods = {method: function for method, function in vars(value).items()
                       if method in ("__init__", "__enter__", "__exit__")}
            if "__init__" in methods:
                _untraced[name] = (value, methods)
                for method, function in methods.items():
                    setattr(value, method, _recording(name, function, method=True, record=method == "__init__"))
        else:
            _untraced[name] = value
            setattr(module, name, _recording(name, value))
    for interface, cls, names in _traced_methods:
        _record_methods(interface, cls, names)


def trace_methods(interface: str, cls: type, names: Sequence[str]) -> None:
    """Record the calls of `cls`'s methods `names` (its own or inherited) as calls of `interface` while a trace is
    on, from now on: sim's Python classes that PyTorch calls (inductor's and dynamo's, step 13) are interfaces too."""
    _traced_methods.append((interface, cls, tuple(names)))
    if _runtime().interface_trace_on():
        _record_methods(interface, cls, names)


def _record_methods(interface: str, cls: type, names: Sequence[str]) -> None:
    for name in names:
        descriptor = inspect.getattr_static(cls, name)
        if isinstance(descriptor, (staticmethod, classmethod)):
            wrapped = type(descriptor)(_recording(f"{cls.__name__}.{name}", descriptor.__func__,
                                                  method=isinstance(descriptor, classmethod), interface=interface))
        else:
            wrapped = _recording(f"{cls.__name__}.{name}", descriptor, method=True, interface=interface)
        _untraced_methods.append((cls, name, vars(cls).get(name)))
        setattr(cls, name, wrapped)


def _stop_recording_device_module_calls() -> None:
    for cls, name, own in reversed(_untraced_methods):
        if own is None:
            delattr(cls, name)
        else:
            setattr(cls, name, own)
    _untraced_methods.clear()
    module = sys.modules[__name__]
    for name, original in _untraced.items():
        if isinstance(original, tuple):
            for method, function in original[1].items():
                setattr(original[0], method, function)
        else:
            setattr(module, name, original)
    _untraced.clear()


def start_interface_trace(ignored_paths: Sequence[str] = ()) -> None:
    """Record every call PyTorch makes into sim's interfaces, and operator begin/end, until stop_interface_trace().

    The interfaces are sim's C++ ones, this module's own functions (interface "device_module": the outermost
    call of each function in `traced_functions()`) and the Python methods later steps hand to `trace_methods`
    (e.g. interface "compile": dynamo's and inductor's calls into sim's classes). Each call's Python line is the innermost frame outside torch,
    torch_sim, the standard library and `ignored_paths` (folders or files, e.g. a tool's own package). One trace
    at a time per process.
    """
    ignored = [_package_folder(torch), _package_folder(torch_sim), sysconfig.get_paths()["stdlib"] + os.sep]
    _runtime().start_interface_trace(ignored + [str(path) for path in ignored_paths])
    _record_device_module_calls()


def stop_interface_trace() -> list[dict[str, Any]]:
    """Stop the trace and return its records in order: sequence, kind ("call", "operator_begin",
    "operator_end"), interface, method, arguments, thread (native id), python ("file:line" or "")."""
    _stop_recording_device_module_calls()
    return _runtime().stop_interface_trace()


def export(*functions: Callable | type, **named: Any) -> None:
    """Add functions to torch.sim; the later steps call this as they are installed."""
    module = sys.modules[__name__]
    for function in functions:
        setattr(module, function.__name__, function)
    for name, value in named.items():
        setattr(module, name, value)


def install() -> None:
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False
    )
