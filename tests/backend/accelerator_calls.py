"""The calls that test_accelerator_api.py makes: one scenario per public name of `torch.accelerator`.

`python -m tests.backend.accelerator_calls SCENARIO [MODULE]` imports MODULE first when given (a backend that is
not autoloaded), puts tensors on the current accelerator's devices and in pinned memory, then runs SCENARIO. Its
asserts fail with a traceback; "ok" on the last line means it passed; a crash shows as a negative return code.
Every scenario calls its function with no device, an index and a torch.device where the function takes one, and
checks the answer against the device module's counterpart (torch.sim.memory_allocated and so on) where it has one.
"""
from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

OUT_OF_RANGE = "The device index is out of range"  # PyTorch's own wording, which its tests match
SCENARIOS: dict[str, Callable[[], None]] = {}


def scenario(function: Callable[[], None]) -> Callable[[], None]:
    """Register a scenario under the name of the torch.accelerator function it exercises."""
    SCENARIOS[function.__name__] = function
    return function


def accelerator() -> torch.device:
    found = torch.accelerator.current_accelerator()
    assert found is not None, "no accelerator in this process"
    return found


def name() -> str:
    return accelerator().type


def last() -> int:
    """The highest device index: the scenarios check that a call is about the device it names, not device 0."""
    return torch.accelerator.device_count() - 1


def device_forms(index: int) -> list[Any]:
    """The ways a caller names device `index`: an int, a string and a torch.device."""
    return [index, f"{name()}:{index}", torch.device(name(), index)]


def module() -> Any:
    """The device module (torch.sim for sim)."""
    return torch.get_device_module(name())


def refused(call: Callable[[], Any], error: type[BaseException] = RuntimeError,
            starts_with: str | tuple[str, ...] = OUT_OF_RANGE) -> str:
    """Run `call`, which must raise `error` with a message starting with `starts_with` (or one of them)."""
    try:
        call()
    except error as raised:
        message = str(raised)
        assert message.startswith(starts_with), f"{type(raised).__name__} not starting with {starts_with!r}: {message}"
        return message
    raise AssertionError(f"{call} did not raise {error.__name__}")


def deprecated(call: Callable[[], Any]) -> Any:
    """Run a deprecated alias: it must warn with a FutureWarning and still answer."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert any(issubclass(w.category, FutureWarning) for w in caught), [str(w.message) for w in caught]
    return result


def same_as_counterpart(function: str, *arguments: Any) -> Any:
    """torch.accelerator.<function>(*arguments), checked against the device module's function of the same name."""
    answer = getattr(torch.accelerator, function)(*arguments)
    counterpart = getattr(module(), function, None)
    if counterpart is not None:
        assert counterpart(*arguments) == answer, f"{name()}.{function}{arguments} disagrees with torch.accelerator"
    return answer


@scenario
def device_count() -> None:
    assert torch.accelerator.device_count() == module().device_count() >= 1


@scenario
def is_available() -> None:
    assert torch.accelerator.is_available() and module().is_available()


@scenario
def current_accelerator() -> None:
    assert torch.accelerator.current_accelerator(check_available=True) == torch.device(name())
    assert accelerator().type == torch.device("privateuseone").type


@scenario
def current_device_index() -> None:
    assert torch.accelerator.current_device_index() == module().current_device() == 0
    module().set_device(last())
    assert torch.accelerator.current_device_index() == last()


@scenario
def current_device_idx() -> None:
    assert deprecated(torch.accelerator.current_device_idx) == torch.accelerator.current_device_index() == 0


@scenario
def set_device_index() -> None:
    for form in device_forms(last()):
        torch.accelerator.set_device_index(0)
        torch.accelerator.set_device_index(form)
        assert torch.accelerator.current_device_index() == module().current_device() == last(), form
    count = torch.accelerator.device_count()
    refused(lambda: torch.accelerator.set_device_index(count))
    refused(lambda: torch.accelerator.set_device_index(torch.device(name(), count)))
    refused(lambda: torch.accelerator.set_device_index("cpu"), ValueError, "cpu doesn't match")
    assert torch.accelerator.current_device_index() == last(), "a refused index changed the current device"


@scenario
def set_device_idx() -> None:
    deprecated(lambda: torch.accelerator.set_device_idx(last()))
    assert torch.accelerator.current_device_index() == last()


@scenario
def get_device_capability() -> None:
    """The supported dtypes, from the guard's getDeviceCapability (sim's and the template's both answer)."""
    for form in [None, *device_forms(last())]:
        assert torch.float32 in torch.accelerator.get_device_capability(form)["supported_dtypes"], form
    refused(lambda: torch.accelerator.get_device_capability(torch.accelerator.device_count()))


@scenario
def current_stream() -> None:
    assert torch.accelerator.current_stream().device == torch.device(name(), 0)
    for form in device_forms(last()):
        stream = torch.accelerator.current_stream(form)
        assert isinstance(stream, torch.Stream) and stream.device == torch.device(name(), last()), (form, stream)
    refused(lambda: torch.accelerator.current_stream(torch.accelerator.device_count()))


@scenario
def set_stream() -> None:
    previous = torch.accelerator.current_stream(last())
    stream = torch.Stream(device=f"{name()}:{last()}")
    torch.accelerator.set_stream(stream)
    assert torch.accelerator.current_stream(last()) == stream
    assert torch.accelerator.current_device_index() == last(), "set_stream makes the stream's device current"
    done = torch.ones(8, device=name()) * 2  # work on the new current stream
    assert done.device == torch.device(name(), last()) and done.sum().item() == 16
    torch.accelerator.set_stream(previous)
    assert torch.accelerator.current_stream(last()) == previous


@scenario
def synchronize() -> None:
    for form in [None, *device_forms(last())]:
        assert torch.accelerator.synchronize(form) is None
    refused(lambda: torch.accelerator.synchronize(torch.accelerator.device_count()))


@scenario
def device_index() -> None:
    with torch.accelerator.device_index(last()):
        assert torch.accelerator.current_device_index() == last()
        assert torch.ones(1, device=name()).device == torch.device(name(), last())
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == 0

    def enter_missing_device() -> None:
        with torch.accelerator.device_index(torch.accelerator.device_count()):
            pass

    refused(enter_missing_device)
    assert torch.accelerator.current_device_index() == 0


@scenario
def empty_cache() -> None:
    block = torch.empty(1 << 20, device=name())
    del block
    reserved = torch.accelerator.memory_reserved()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() <= reserved
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated(), "a free block stayed cached"
    assert torch.ones(4, device=name()).sum().item() == 4


@scenario
def empty_host_cache() -> None:
    pinned = torch.ones(1 << 16).pin_memory()
    del pinned
    stats = getattr(module(), "host_memory_stats", None)
    if stats is not None:
        assert stats()["allocated_bytes.current"] > stats()["active_bytes.current"], "a freed pinned block is cached"
    torch.accelerator.empty_host_cache()
    if stats is not None:
        assert stats()["allocated_bytes.current"] == stats()["active_bytes.current"], stats()
        assert stats()["num_host_free"] >= 1
    again = torch.ones(1 << 16).pin_memory()
    assert again.is_pinned() and torch.equal(again.to(name()).cpu(), torch.ones(1 << 16))
    torch.accelerator.empty_host_cache()


@scenario
def memory_stats() -> None:
    for index in (0, last()):
        for form in device_forms(index):
            stats = torch.accelerator.memory_stats(form)
            assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated(form), form
            assert stats["reserved_bytes.all.current"] == torch.accelerator.memory_reserved(form), form
    assert torch.accelerator.memory_stats() == torch.accelerator.memory_stats(0)
    counterpart = getattr(module(), "memory_stats", None)
    if counterpart is not None:
        ours = counterpart(last())
        theirs = torch.accelerator.memory_stats(last())
        assert ours["allocated_bytes.all.current"] == theirs["allocated_bytes.all.current"]
        assert ours["reserved_bytes.all.current"] == theirs["reserved_bytes.all.current"]
    refused(lambda: torch.accelerator.memory_stats(torch.accelerator.device_count()))


@scenario
def memory_allocated() -> None:
    assert same_as_counterpart("memory_allocated") >= 4000  # the 1000 floats made on device 0
    for form in device_forms(last()):
        assert same_as_counterpart("memory_allocated", form) >= 40, form  # the 10 floats on the last device
    before = torch.accelerator.memory_allocated(0)
    block = torch.empty(1 << 16, device=f"{name()}:0")
    assert torch.accelerator.memory_allocated(0) >= before + block.nbytes
    del block
    assert torch.accelerator.memory_allocated(0) == before


@scenario
def max_memory_allocated() -> None:
    for form in [None, *device_forms(last())]:
        current = torch.accelerator.memory_allocated(form)
        assert same_as_counterpart("max_memory_allocated", *([] if form is None else [form])) >= current, form


@scenario
def memory_reserved() -> None:
    for form in [None, *device_forms(last())]:
        arguments = [] if form is None else [form]
        assert same_as_counterpart("memory_reserved", *arguments) >= torch.accelerator.memory_allocated(form), form


@scenario
def max_memory_reserved() -> None:
    for form in [None, *device_forms(last())]:
        arguments = [] if form is None else [form]
        assert same_as_counterpart("max_memory_reserved", *arguments) >= torch.accelerator.memory_reserved(form)


@scenario
def reset_peak_memory_stats() -> None:
    for form in [None, *device_forms(last())]:
        index = 0 if form is None else last()
        block = torch.empty(1 << 18, device=f"{name()}:{index}")
        del block
        assert torch.accelerator.max_memory_allocated(form) > torch.accelerator.memory_allocated(form), form
        torch.accelerator.reset_peak_memory_stats(form)
        assert torch.accelerator.max_memory_allocated(form) == torch.accelerator.memory_allocated(form), form
    refused(lambda: torch.accelerator.reset_peak_memory_stats(torch.accelerator.device_count()))


@scenario
def reset_accumulated_memory_stats() -> None:
    for form in [None, *device_forms(last())]:
        index = 0 if form is None else last()
        torch.ones(4, device=f"{name()}:{index}")
        assert torch.accelerator.memory_stats(form)["allocation.all.allocated"] > 0, form
        torch.accelerator.reset_accumulated_memory_stats(form)
        assert torch.accelerator.memory_stats(form)["allocation.all.allocated"] == 0, form
    refused(lambda: torch.accelerator.reset_accumulated_memory_stats(torch.accelerator.device_count()))


@scenario
def get_memory_info() -> None:
    for form in [None, *device_forms(last())]:
        free, total = torch.accelerator.get_memory_info(form)
        assert 0 <= free <= total and total > 0, (form, free, total)
        # A simulated device has no other process: what is not free is what the allocator holds.
        assert free == total - torch.accelerator.memory_reserved(form), (form, free, total)
        mem_get_info = getattr(module(), "mem_get_info", None)
        if mem_get_info is not None:
            assert tuple(mem_get_info(form)) == (free, total), form
    refused(lambda: torch.accelerator.get_memory_info(torch.accelerator.device_count()))


@scenario
def Graph() -> None:  # noqa: N802  (named after torch.accelerator.Graph)
    # Graph capture (guide step 15): work captured on a side stream runs at each replay.
    x = torch.ones(2, device=name())
    graph = torch.accelerator.Graph()
    with torch.Stream(device=name()), graph:
        x.add_(1)
    graph.replay()
    graph.replay()
    assert x.tolist() == [3.0, 3.0], f"two replays of x += 1 gave {x.tolist()}"
    assert len(graph.pool()) == 2
    graph.reset()
    assert torch.ones(2, device=name()).sum().item() == 2, "the graph left the device unusable"


def empty_host_cache_after_failed_starts() -> None:
    """Run without the set-up: the device may not start (a partial bring-up), yet empty_host_cache() must not crash."""
    for attempt in (lambda: torch.ones(1, device=name()), lambda: torch.ones(2).pin_memory()):
        try:
            attempt()
        except (RuntimeError, NotImplementedError):
            pass
    torch.accelerator.empty_host_cache()


WITHOUT_SET_UP = {"empty_host_cache_after_failed_starts": empty_host_cache_after_failed_starts}
KEEP: list[torch.Tensor] = []  # the tensors that put the devices in use, alive while a scenario runs


def main(arguments: list[str]) -> None:
    if len(arguments) > 1:
        importlib.import_module(arguments[1])
    if arguments[0] in WITHOUT_SET_UP:
        WITHOUT_SET_UP[arguments[0]]()
        print("ok")
        return
    KEEP.extend([torch.ones(1000, device=f"{name()}:0"), torch.ones(10, device=f"{name()}:{last()}"),
                 torch.ones(100).pin_memory()])
    SCENARIOS[arguments[0]]()
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:])
