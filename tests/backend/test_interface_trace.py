"""sim's interface trace: every call PyTorch makes into sim's interfaces, in order, with thread and Python line."""
import threading

import pytest
import torch

HERE = __file__


def line_of(marker: str) -> str:
    """`file:line` of the line of this file that holds `marker` (the test's own calls)."""
    with open(HERE) as source:
        for number, text in enumerate(source, start=1):
            if marker in text and "line_of(" not in text:
                return f"{HERE}:{number}"
    raise AssertionError(f"no line holds {marker!r}")


def calls(records, thread=None):
    return [(r["interface"], r["method"], r["arguments"]) for r in records
            if r["kind"] == "call" and (thread is None or r["thread"] == thread)]


@pytest.fixture
def no_trace_left_on():
    yield
    if torch.sim._runtime().interface_trace_on():
        torch.sim.stop_interface_trace()


def test_device_index_block_records_guard_allocator_and_generator_in_order(no_trace_left_on):
    torch.sim.start_interface_trace()
    with torch.accelerator.device_index(1):  # marker: enter
        torch.randn(100, device="sim:1")  # marker: randn
    records = torch.sim.stop_interface_trace()
    assert [r["sequence"] for r in records] == list(range(len(records)))
    assert {r["thread"] for r in records} == {threading.get_native_id()}
    methods = [(interface, method) for interface, method, _ in calls(records)]
    exchange_to_1 = methods.index(("guard", "exchangeDevice"))
    allocation = methods.index(("allocator", "allocate"))
    generator = methods.index(("hooks", "getDefaultGenerator"))
    back = len(methods) - 1 - methods[::-1].index(("guard", "uncheckedSetDevice"))
    assert exchange_to_1 < allocation < generator < back
    listed = calls(records)
    assert listed[exchange_to_1][2] == "device=sim:1"
    assert listed[allocation][2] == "nbytes=400 device=1"
    assert listed[generator][2] == "device=1"
    assert listed[back][2] == "device=sim:0"  # the exchange back to the device current before the block
    by_method = {(r["interface"], r["method"]): r for r in records if r["kind"] == "call"}
    assert by_method[("guard", "setDevice")]["python"] == line_of("# marker: enter")
    assert by_method[("allocator", "allocate")]["python"] == line_of("# marker: randn")


def test_interface_calls_nest_under_the_operator_that_made_them(no_trace_left_on):
    torch.sim.start_interface_trace()
    torch.empty(8, device="sim")
    records = torch.sim.stop_interface_trace()
    kinds = [(r["kind"], r["method"]) for r in records]
    begin = kinds.index(("operator_begin", "aten::empty"))
    end = kinds.index(("operator_end", "aten::empty"))
    allocate = kinds.index(("call", "allocate"))
    assert begin < allocate < end


def test_calls_from_another_thread_carry_that_thread(no_trace_left_on):
    seen = {}

    def work():
        seen["thread"] = threading.get_native_id()
        torch.ones(4, device="sim")

    torch.sim.start_interface_trace()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    records = torch.sim.stop_interface_trace()
    assert ("allocator", "allocate") in [(i, m) for i, m, _ in calls(records, thread=seen["thread"])]
    assert not calls(records, thread=threading.get_native_id())


def test_hooks_and_host_allocator_calls_are_recorded(no_trace_left_on):
    torch.sim.start_interface_trace()
    pinned = torch.ones(16).pin_memory()
    assert pinned.is_pinned()
    torch.sim.manual_seed(3)
    records = torch.sim.stop_interface_trace()
    methods = {(i, m) for i, m, _ in calls(records)}
    assert {("hooks", "getPinnedMemoryAllocator"), ("host_allocator", "allocate"), ("hooks", "isPinnedPtr"),
            ("generator", "set_current_seed")} <= methods


def test_nothing_is_recorded_while_the_trace_is_off(no_trace_left_on):
    torch.randn(10, device="sim:1")  # runs with the trace off
    torch.sim.start_interface_trace()
    records = torch.sim.stop_interface_trace()
    assert records == []
    assert not torch.sim._runtime().interface_trace_on()


def test_starting_twice_is_one_clear_error(no_trace_left_on):
    torch.sim.start_interface_trace()
    with pytest.raises(RuntimeError, match="an interface trace is already on: call stop_interface_trace") as error:
        torch.sim.start_interface_trace()
    assert "\n" not in str(error.value).strip()


def test_stopping_without_a_trace_is_one_clear_error():
    with pytest.raises(RuntimeError, match="no interface trace is on: call start_interface_trace") as error:
        torch.sim.stop_interface_trace()
    assert "\n" not in str(error.value).strip()


def test_ignored_paths_move_the_line_outwards(no_trace_left_on):
    torch.sim.start_interface_trace(ignored_paths=[HERE])
    torch.empty(3, device="sim")
    records = torch.sim.stop_interface_trace()
    allocate = next(r for r in records if r["method"] == "allocate")
    assert allocate["python"] and not allocate["python"].startswith(HERE)  # pytest's frame, outside this file


def test_the_device_modules_functions_record_their_outermost_calls(no_trace_left_on):
    original = torch.sim.device_count
    torch.sim.start_interface_trace()
    available = torch.accelerator.is_available()
    with torch.sim.device(1):  # marker: device block
        pass
    records = torch.sim.stop_interface_trace()
    module_calls = [(method, arguments) for interface, method, arguments in calls(records)
                    if interface == "device_module"]
    assert available and ("is_available", "") in module_calls and ("device", "1") in module_calls
    # the device block's own current_device()/set_device() are sim's inner calls, not PyTorch's: not recorded
    assert "set_device" not in [method for method, _ in module_calls]
    by_method = {r["method"]: r["python"] for r in records if r["kind"] == "call" and r["interface"] == "device_module"}
    assert by_method["device"] == line_of("# marker: device block")
    # stopping puts the module's own functions back
    assert torch.sim.device_count is original and "__wrapped__" not in vars(torch.sim.device.__init__)


def test_simccl_records_each_collective_and_its_work(no_trace_left_on):
    import torch.distributed as dist

    dist.init_process_group("simccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        tensor = torch.ones(3, device="sim")
        torch.sim.start_interface_trace()
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()
        dist.broadcast(tensor, src=0)
        records = torch.sim.stop_interface_trace()
    finally:
        dist.destroy_process_group()
    methods = [method for interface, method, _ in calls(records) if interface == "distributed"]
    assert methods[:2] == ["allreduce", "wait"] and "broadcast" in methods
    assert ("distributed", "allreduce", "rank=0") in calls(records)
