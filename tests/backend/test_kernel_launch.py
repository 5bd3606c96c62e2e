"""Step 5: sim's kernels are launches on its driver's streams: they run on the driver's executor, after the work
queued before them, while the host goes on; a small pointwise kernel that its caller waits for runs on the calling
thread instead, after the same work (backend/torch_sim/csrc/operators_launch.cpp)."""
import functools
import os
import threading
import time

import pytest
import torch
import torch_sim  # noqa: F401

from tests.backend.device_sleeps import LONG_MS, within
from tests.conftest import run_forked

def test_a_computing_kernel_returns_before_the_device_ran_it():
    x = torch.arange(1024, dtype=torch.float32, device="sim")
    x * 2  # the first launch of a dtype combination runs before its call returns (launch_direct)
    sleep = torch.sim.device_sleep(LONG_MS)
    launched = time.monotonic()
    doubled = x * 2
    pending = torch.sim.current_stream().query()
    assert within(launched, LONG_MS), "the host itself stalled for half the sleep; the test proves nothing this time"
    assert not pending, "the multiply is queued behind the sleep"
    sleep.wake()
    assert torch.equal(doubled.cpu(), torch.arange(1024, dtype=torch.float32) * 2), ".cpu() waits for it"


# The direct kernels whose impl() is the CPU's own, run on host views of the device's memory (operators_direct.cpp,
# DirectHostImpl): each call, and the CPU's computation of it.
HOST_IMPL_CALLS = {
    "mm": lambda a, b: torch.mm(a, b),
    "addmm": lambda a, b: torch.addmm(b[0], a, b, beta=0.5),
    "bmm": lambda a, b: torch.bmm(a.expand(2, 64, 64), b.expand(2, 64, 64)),
    "_softmax": lambda a, b: torch.softmax(a, 1),
    "_log_softmax": lambda a, b: torch.log_softmax(a, 0),
    "sum.dim_IntList": lambda a, b: a.sum(1),
    "mean.dim": lambda a, b: b.mean(0, keepdim=True),
    "tril": lambda a, b: a.tril(1),
    "triu": lambda a, b: b.triu(-1),
    "gelu": lambda a, b: torch.nn.functional.gelu(a, approximate="tanh"),
    "gelu_backward": lambda a, b: torch.ops.aten.gelu_backward(a, b),
    "_softmax_backward_data": lambda a, b: torch.ops.aten._softmax_backward_data(a, b.softmax(1), 1, a.dtype),
    "_log_softmax_backward_data": lambda a, b: torch.ops.aten._log_softmax_backward_data(a, b.log_softmax(0), 0,
                                                                                         a.dtype),
    "nll_loss_forward": lambda a, b: torch.ops.aten.nll_loss_forward(a, classes_on(a.device), None, 1, -100)[0],
    "nll_loss_backward": lambda a, b: torch.ops.aten.nll_loss_backward(a[0, 0], b, classes_on(a.device), None, 2, 1,
                                                                       a[1, 1]),
    "native_layer_norm": lambda a, b: torch.native_layer_norm(a, (64,), b[0], b[1], 1e-5)[0],
    "where.self": lambda a, b: torch.where(a > 0, a, b[0]),
    "where.self of numbers": lambda a, b: torch.where(a > 0, 0.0, -1.5),
    "where.self_out": lambda a, b: torch.where(a > 0, a, b, out=torch.empty(0, device=a.device)),
    "index_select": lambda a, b: a.index_select(1, classes_on(a.device)),
    "gather": lambda a, b: torch.gather(a, 1, classes_on(a.device).unsqueeze(1)),
    "arange.start_out": lambda a, b: torch.arange(0.5, 64, 0.25, device=a.device),
    "cat": lambda a, b: torch.cat([a, b.t()], 1),
    "embedding_dense_backward": lambda a, b: torch.ops.aten.embedding_dense_backward(a, classes_on(a.device), 64, 3,
                                                                                     True),
    "native_layer_norm_backward": lambda a, b: torch.ops.aten.native_layer_norm_backward(
        a, b, (64,), b[:, :1], b[:, 1:2], b[0], b[1], [True, True, True])[1],
    "_scaled_dot_product_flash_attention_for_cpu":
        lambda a, b: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            a.view(1, 4, 64, 16), b.view(1, 4, 64, 16), b.view(1, 4, 64, 16), 0.0, True)[0],
    "_scaled_dot_product_flash_attention_for_cpu_backward":
        lambda a, b: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            a.view(1, 4, 64, 16), b.view(1, 4, 64, 16), a.view(1, 4, 64, 16), b.view(1, 4, 64, 16),
            a.view(1, 4, 64, 16), b.view(1, 4, 64, 16)[..., 0], 0.0, False)[1],
}


@functools.cache
def classes_on(device: torch.device) -> torch.Tensor:
    """A class for each of 64 rows of 64 scores, made once per device (the first, unqueued launch makes sim's)."""
    return (torch.arange(64) * 7 % 64).to(device)


def returned_while_the_device_slept(operator: str, launch):
    """Calls `launch` behind a device sleep and asserts that it returned with its work still queued; then wakes the
    device and returns what `launch` returned. The direct route's exits are counted from before the call."""
    torch.sim.reset_direct_route_exits()
    sleep = torch.sim.device_sleep(LONG_MS)
    launched = time.monotonic()
    result = launch()
    pending = torch.sim.current_stream().query()
    assert within(launched, LONG_MS), "the host itself stalled for half the sleep; the test proves nothing this time"
    assert not pending, f"{operator} is queued behind the sleep"
    sleep.wake()
    return result


@pytest.mark.parametrize("operator", HOST_IMPL_CALLS)
def test_a_direct_kernel_that_runs_the_cpus_impl_returns_before_the_device_ran_it(operator):
    """A matrix product, softmax, sum, triangle, where or gather is queued as the element-wise kernels are: the host
    goes on, and the result is the CPU's once the device ran it."""
    call = HOST_IMPL_CALLS[operator]
    a, b = torch.randn(64, 64, generator=torch.Generator().manual_seed(1)), torch.randn(64, 64)
    on_sim = a.to("sim"), b.to("sim")
    call(*on_sim)  # the first launch of a dtype combination runs before its call returns (launch_direct)
    result = returned_while_the_device_slept(operator, lambda: call(*on_sim))
    assert torch.equal(result.cpu(), call(a, b)), f"{operator}: not the CPU's bits"
    assert torch.sim.direct_route_exits() == {}, f"{operator} left its direct kernel"


# Host kernels whose outputs' geometry follows from their arguments' geometry (operators.cpp, kOutputsFollowGeometry and
# the convolutions): each call on an input `x` of 2 images of 3 channels and a 3-channel convolution `weight`.
ARGUMENTS_GEOMETRY_CALLS = {
    "convolution_overrideable": lambda x, weight: torch.nn.functional.conv2d(x, weight, padding=1),
    "convolution_backward_overrideable": lambda x, weight: torch.ops.aten.convolution_backward(
        x, x, weight, [3], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])[1],
    "max_pool2d_with_indices": lambda x, weight: torch.nn.functional.max_pool2d(x, 2),
    "max_pool2d_with_indices_backward": lambda x, weight: torch.ops.aten.max_pool2d_with_indices_backward(
        x[:, :, ::2, ::2], x, [2, 2], [2, 2], [0, 0], [1, 1], False, torch.nn.functional.max_pool2d(
            x, 2, return_indices=True)[1]),
    "avg_pool2d": lambda x, weight: torch.nn.functional.avg_pool2d(x, 2),
    "avg_pool2d_backward": lambda x, weight: torch.ops.aten.avg_pool2d_backward(
        x[:, :, ::2, ::2], x, [2, 2], [2, 2], [0, 0], False, True, None),
    "_adaptive_avg_pool2d": lambda x, weight: torch.nn.functional.adaptive_avg_pool2d(x, 1),
    "_adaptive_avg_pool2d_backward": lambda x, weight: torch.ops.aten._adaptive_avg_pool2d_backward(x[:, :, :1, :1],
                                                                                                     x),
    "native_batch_norm": lambda x, weight: torch.native_batch_norm(x, weight[0, 0, 0], weight[1, 0, 0],
                                                                   weight[2, 0, 0], weight[0, 1, 1] * weight[0, 1, 1],
                                                                   True, 0.1, 1e-5)[0],
    "native_batch_norm_backward": lambda x, weight: torch.ops.aten.native_batch_norm_backward(
        x, x, weight[0, 0, 0], None, None, weight[1, 0, 0], weight[2, 0, 0] * weight[2, 0, 0], True, 1e-5,
        [True, True, True])[1],
}


@pytest.mark.parametrize("operator", ARGUMENTS_GEOMETRY_CALLS)
def test_a_host_kernel_whose_arguments_geometry_ran_before_returns_before_the_device_ran_it(operator):
    """The first call with a geometry of arguments runs at the call and keeps its outputs' geometry; a later call with
    that geometry allocates its outputs at once and is queued, and computes the CPU's bits."""
    call = ARGUMENTS_GEOMETRY_CALLS[operator]
    generator = torch.Generator().manual_seed(3)
    x, weight = torch.randn(2, 3, 8, 8, generator=generator), torch.randn(3, 3, 3, 3, generator=generator)
    on_sim = x.to("sim"), weight.to("sim")
    call(*on_sim)
    result = returned_while_the_device_slept(operator, lambda: call(*on_sim))
    expected = call(x, weight)
    assert result.stride() == expected.stride(), f"{operator}: not the CPU's layout"
    assert torch.equal(result.cpu(), expected), f"{operator}: not the CPU's bits"


def test_a_geometry_seen_after_more_geometries_than_sim_keeps_is_still_queued():
    """sim keeps the newest few hundred geometries of each operator, forgetting the oldest: a model's geometries are
    learned again after a sweep of many others."""
    for width in range(2, 700):
        torch.nn.functional.avg_pool2d(torch.zeros(1, 1, 2, width, device="sim"), 2)
    x = torch.randn(2, 3, 8, 8, device="sim")
    torch.nn.functional.avg_pool2d(x, 2)
    pooled = returned_while_the_device_slept("avg_pool2d", lambda: torch.nn.functional.avg_pool2d(x, 2))
    assert torch.equal(pooled.cpu(), torch.nn.functional.avg_pool2d(x.cpu(), 2))


def test_a_convolution_of_a_new_geometry_raises_the_cpus_error_at_the_call():
    """A geometry that never ran runs at the call, so its error is the CPU's, raised there, even after other
    geometries of the same convolution were queued; the device goes on."""
    x, weight = torch.randn(2, 3, 8, 8, device="sim"), torch.randn(4, 3, 3, 3, device="sim")
    for _ in range(2):
        torch.nn.functional.conv2d(x, weight)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.nn.functional.conv2d(x.cpu(), weight.cpu()[:, :2])
    with pytest.raises(RuntimeError) as on_sim:
        torch.nn.functional.conv2d(x, weight[:, :2])
    assert str(on_sim.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.equal(torch.nn.functional.conv2d(x, weight).cpu(), torch.nn.functional.conv2d(x.cpu(), weight.cpu()))


def test_a_queued_gradient_becomes_the_parameters_gradient_without_a_copy():
    """A launch holds no reference to the outputs it computes into, so autograd takes a convolution's, a batch norm's
    gradient as the parameter's own instead of copying it (a copy shows in the profile as a device copy)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).to("sim")
    x = torch.randn(2, 3, 8, 8, device="sim")
    for _ in range(2):  # the second step queues every kernel
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(x).sum().backward()
    copies = [event for event in prof.events() if event.name == "aten::copy_" and event.cpu_parent is not None
              and "AccumulateGrad" in event.cpu_parent.name]
    assert copies == [], f"autograd copied {len(copies)} gradients"


def test_a_class_out_of_range_in_a_queued_loss_is_raised_by_the_next_synchronising_call():
    """nll_loss reads its targets on the device: as with CUDA's device-side assertion, the launch returns and the next
    synchronising call raises, naming the kernel and the class."""
    scores = torch.randn(4, 3, device="sim")
    torch.nn.functional.cross_entropy(scores, torch.tensor([0, 1, 2, 0], device="sim"))  # the first launch runs at once
    torch.sim.synchronize()
    torch.nn.functional.cross_entropy(scores, torch.tensor([0, 1, 7, 0], device="sim"))
    with pytest.raises(RuntimeError, match=r"the kernel 'sim::nll_loss_forward' failed on sim:0 .*Target 7 is out of "
                                           r"bounds"):
        torch.sim.synchronize()
    loss = torch.nn.functional.cross_entropy(scores, torch.tensor([0, 1, 2, 0], device="sim"))
    assert torch.equal(loss.cpu(), torch.nn.functional.cross_entropy(scores.cpu(), torch.tensor([0, 1, 2, 0])))


# Kernels that copy or fill, and relu: each call on sim tensors, and the same call on the CPU's (operators_direct.cpp:
# DirectClone, DirectFill, zero_, which is fill_(0) on every device, and relu, which is clamp_min(self, 0); operators.cpp:
# sim_copy_from, for copies within one device and copies of no elements).
COPY_FILL_AND_RELU_CALLS = {
    "clone": lambda a: a.clone(),
    "clone of a transposed view": lambda a: a.t().clone(),
    "clone into channels-last": lambda a: a.view(1, 4, 32, 32).clone(memory_format=torch.channels_last),
    "copy_ of a transposed view": lambda a: torch.empty_like(a).copy_(a.t()),
    "copy_ of a row to every row": lambda a: torch.empty_like(a).copy_(a[3]),
    "copy_ converting to float16": lambda a: a.to(torch.float16),
    "copy_ of no elements from the host": lambda a: torch.empty(0, 64, device=a.device).copy_(torch.empty(0, 64)),
    "copy_ of no elements to the host": lambda a: a[:0].cpu(),
    "fill_": lambda a: a.fill_(-1.5),
    "zero_": lambda a: a.zero_(),
    "relu": lambda a: a.relu(),
    "relu_": lambda a: a.relu_(),
}


@pytest.mark.parametrize("operator", COPY_FILL_AND_RELU_CALLS)
def test_copies_fills_and_relu_return_before_the_device_ran_them(operator):
    call = COPY_FILL_AND_RELU_CALLS[operator]
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    on_sim = a.to("sim")
    call(on_sim.clone())  # the first launch of a dtype combination runs before its call returns (launch_direct)
    argument = on_sim.clone()
    torch.sim.synchronize()
    result = returned_while_the_device_slept(operator, lambda: call(argument))
    expected = call(a.clone())
    assert torch.equal(result.cpu(), expected) and result.stride() == expected.stride(), f"{operator}: not the CPU's"
    assert torch.sim.direct_route_exits() == {}, f"{operator} left its direct kernel"


# Copies within one device that the CPU's copy refuses or warns about: they wait for the device, so that the call
# itself raises or warns (operators.cpp: queued_copy).
REFUSED_COPIES = {
    "into a slice of its own source": (lambda x: x[1:].copy_(x[:-1]), RuntimeError, "refer to a single memory"),
    "of itself transposed": (lambda x: x[:4].view(2, 2).copy_(x[:4].view(2, 2).t()), RuntimeError,
                             "refer to a single memory"),
    "of a shape that does not broadcast": (lambda x: torch.empty(3, 4, device=x.device).copy_(x[:5]), RuntimeError,
                                           "must match the size"),
    "into no elements, of a shape that does not broadcast": (
        lambda x: torch.empty(0, 4, device=x.device).copy_(x[:5]), RuntimeError, "must match the size"),
}


@pytest.mark.parametrize("case", REFUSED_COPIES)
def test_a_copy_the_cpu_refuses_raises_at_the_call_as_on_the_cpu(case):
    call, error, message = REFUSED_COPIES[case]
    with pytest.raises(error, match=message):
        call(torch.arange(6.0))
    on_sim = torch.arange(6.0, device="sim")
    sleep = torch.sim.device_sleep(LONG_MS)
    waker = threading.Timer(0.2, sleep.wake)
    waker.start()
    with pytest.raises(error, match=message):
        call(on_sim)
    waker.join()
    assert on_sim.cpu().tolist() == list(range(6)), "the refused copy wrote"


def test_a_copy_that_drops_the_imaginary_part_warns_at_the_call_as_on_the_cpu():
    target = torch.empty(3, device="sim")
    warned_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # the CPU warns once a process: an earlier test may have had the one warning
    try:
        with pytest.warns(UserWarning, match="discards the imaginary part"):
            target.copy_(torch.tensor([1 + 2j, 3 - 1j, 0.5j], device="sim"))
    finally:
        torch.set_warn_always(warned_always)
    assert target.cpu().tolist() == [1.0, 3.0, 0.0]


def test_a_fill_with_a_number_the_dtype_cannot_hold_raises_at_the_call_as_on_the_cpu():
    """The conversion is the one way a fill fails; it runs at the call, as the CPU's and CUDA's do, so the error is
    raised there and not at a later synchronising call."""
    on_sim, on_cpu = torch.zeros(3, dtype=torch.int8, device="sim"), torch.zeros(3, dtype=torch.int8)
    on_sim.fill_(1)  # the first launch of a dtype combination runs before its call returns (launch_direct)
    with pytest.raises(RuntimeError) as cpu_error:
        on_cpu.fill_(300)
    sleep = torch.sim.device_sleep(LONG_MS)
    try:
        with pytest.raises(RuntimeError) as sim_error:
            on_sim.fill_(300)
    finally:
        sleep.wake()
    assert str(sim_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]
    torch.sim.synchronize()
    assert torch.equal(on_sim.cpu(), torch.ones(3, dtype=torch.int8)), "the refused fill wrote nothing"


def test_the_host_runs_ahead_of_the_device():
    x = torch.ones(256, device="sim")
    total = torch.zeros(256, device="sim")
    total.add_(x)
    sleep = torch.sim.device_sleep(LONG_MS)
    launched = time.monotonic()
    for _ in range(200):
        total.add_(x)
    pending = torch.sim.current_stream().query()
    assert within(launched, LONG_MS) and not pending, "200 launches returned while the device was still asleep"
    sleep.wake()
    assert total.sum().item() == 201 * 256


def test_a_host_kernel_runs_on_the_drivers_executor_and_may_call_python():
    threads = []

    @torch.library.custom_op("sim_launch_test::whose_thread", mutates_args=(), device_types="cpu")
    def whose_thread(x: torch.Tensor) -> torch.Tensor:
        threads.append(threading.get_native_id())
        return x + 1

    torch.sim.set_fallback_policy("silent")
    try:
        result = whose_thread(torch.zeros(4, device="sim"))
    finally:
        torch.sim.set_fallback_policy("warn")
    assert torch.equal(result.cpu(), torch.ones(4))
    assert threads and threads[0] != threading.get_native_id(), "the kernel ran on the calling thread"


def test_a_small_pointwise_kernel_runs_on_the_thread_that_waits_for_it_after_the_queued_work():
    seen = []

    @torch.library.custom_op("sim_launch_test::pointwise_thread", mutates_args=(), device_types="cpu",
                             tags=(torch.Tag.pointwise,))
    def pointwise_thread(x: torch.Tensor) -> torch.Tensor:
        seen.append((threading.get_native_id(), torch.get_num_threads(), time.monotonic()))
        return x + 1

    torch.sim.set_fallback_policy("silent")
    try:
        small = torch.zeros(4, device="sim")
        large = torch.zeros(40_000, device="sim")  # more than a pointwise kernel runs on the calling thread
        torch.sim.synchronize()
        torch.sim.device_sleep(300)
        launched = time.monotonic()
        small_result = pointwise_thread(small)
        large_result = pointwise_thread(large)
    finally:
        torch.sim.set_fallback_policy("warn")
    assert torch.equal(small_result.cpu(), torch.ones(4)) and torch.equal(large_result.cpu(), torch.ones(40_000))
    (small_thread, small_threads, small_ran), (large_thread, _, _) = seen
    assert small_thread == threading.get_native_id(), "the small kernel ran on another thread"
    assert small_threads == 1, "a kernel on the calling thread computes on one intra-op thread, as the executor would"
    assert small_ran - launched >= 0.25, "the small kernel ran before the sleep queued ahead of it had ended"
    assert large_thread != threading.get_native_id(), "the large kernel ran on the calling thread"


def test_the_callers_intra_op_threads_reach_the_device():
    seen = []

    @torch.library.custom_op("sim_launch_test::threads_seen", mutates_args=(), device_types="cpu")
    def threads_seen(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return x.clone()

    before = torch.get_num_threads()
    torch.sim.set_fallback_policy("silent")
    try:
        torch.set_num_threads(1)
        threads_seen(torch.zeros(4, device="sim"))
        torch.set_num_threads(before)
        threads_seen(torch.zeros(4, device="sim"))
    finally:
        torch.set_num_threads(before)
        torch.sim.set_fallback_policy("warn")
    assert seen == [1, before]


def sims_threads() -> int:
    """How many threads of this process are the driver's executor or its OpenMP team (which take its name)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except (FileNotFoundError, ProcessLookupError):  # the thread ended while we looked
            pass
    return names.count("sim-executor"[:15])  # Linux keeps 15 characters of a thread's name


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_the_executor_and_its_openmp_team_end_once_the_device_is_idle():
    """A second OpenMP team beside the host's slows every parallel region in the process; sim's lives only while
    its device has work (backend/simdriver/src/stream.cpp, kRetireAfter)."""
    x = torch.randn(1024, 1024, device="sim")
    x * x  # parallel on the executor: its own OpenMP team
    sleep = torch.sim.device_sleep(LONG_MS)
    team = 2 if torch.get_num_threads() > 1 else 1
    assert wait_until(lambda: sims_threads() >= team, LONG_MS / 1000), "the executor runs the queued work"
    sleep.wake()
    torch.sim.synchronize()
    assert wait_until(lambda: sims_threads() == 0, 10), "the executor outlived the device's work"
    assert torch.equal((x + 1).cpu(), x.cpu() + 1), "the next launch starts the executor again"


def test_python_host_kernels_run_on_the_executor_before_and_after_it_ends_and_starts_again():
    """The executor keeps one Python thread state while it lives, for every Python host kernel it runs (a compiled
    kernel's call), and deletes it when it ends; the next executor, a new thread, makes its own."""
    x = torch.zeros(4, device="sim")
    ran_on = []
    for _ in range(3):
        for _ in range(5):
            torch.sim.run_host_kernel("python_kernel", lambda tensor: ran_on.append(threading.get_native_id()), x)
        assert wait_until(lambda: sims_threads() == 0, 10), "the executor outlived the device's work"
    assert len(ran_on) == 15 and threading.get_native_id() not in ran_on
    first, second, third = (set(ran_on[start:start + 5]) for start in (0, 5, 10))
    assert first.isdisjoint(second) and second.isdisjoint(third), "each executor was a thread of its own"


def copy_then_add(target: torch.Tensor, source: torch.Tensor) -> None:
    target.copy_(source)
    target.add_(1)


def from_host_then_double(target: torch.Tensor, source: torch.Tensor) -> None:
    target.copy_(source)
    target.mul_(2)


def through_the_host(target: torch.Tensor, source: torch.Tensor) -> None:
    target.copy_(source.cpu() + 1)


@pytest.mark.parametrize(("body", "source_device", "expected"), [(copy_then_add, "sim", 3.0),
                                                                (from_host_then_double, "cpu", 4.0),
                                                                (through_the_host, "sim", 3.0)],
                         ids=["device to device", "host to device", "device to host and back"])
def test_a_copy_a_kernel_makes_runs_inside_it_in_the_kernels_order(body, source_device, expected):
    """A copy made by a kernel is part of that kernel, as its other operators are: it runs there, before the kernel's
    next operator, not queued behind the stream's later work or refused as a wait of the host."""
    source = torch.full((1024,), 2.0, device=source_device)
    target = torch.zeros(1024, device="sim")
    torch.sim.run_host_kernel("python_kernel", body, target, source)
    assert torch.equal(target.cpu(), torch.full((1024,), expected))


def test_a_process_exits_cleanly_with_the_executor_holding_a_python_thread_state_or_ending():
    program = ("import time, torch, torch_sim\n"
               "x = torch.zeros(4, device='sim')\n"
               "for pause in (0.0, 0.015, 0.019, 0.021, 0.025):\n"  # around the executor's 20 ms of idleness
               "    torch.sim.run_host_kernel('python_kernel', lambda tensor: tensor.add_(1), x)\n"
               "    time.sleep(pause)\n"
               "torch.sim.run_host_kernel('python_kernel', lambda tensor: tensor.add_(1), x)\n"
               "print(x.sum().item())\n")
    result = run_forked(["-c", program], timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "24.0"


def test_a_warning_raised_in_a_kernel_reaches_python():
    a, b = torch.ones(3, device="sim"), torch.ones(3, device="sim")
    out = torch.empty(5, device="sim")
    with pytest.warns(UserWarning, match="resized"):
        torch.add(a, b, out=out)
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))


def test_an_error_raised_in_a_kernel_keeps_its_python_type_at_the_call():
    x = torch.zeros(3, device="sim")
    with pytest.raises(IndexError, match="out of bounds"):
        x[torch.tensor([5], device="sim")]
    assert x.sum().item() == 0


def test_an_assertion_that_fails_on_the_device_is_raised_by_the_next_synchronising_call():
    torch._assert_async(torch.tensor(3.0, device="sim"))
    torch._assert_async(torch.tensor(0, device="sim"), "the count was zero")  # returns: the device checks later
    with pytest.raises(RuntimeError, match=r"the kernel 'sim::_assert_async.msg' failed on sim:0 .*the count was zero"):
        torch.sim.synchronize()
    torch.sim.synchronize()  # the error was reported once; the device runs work again
    assert (torch.ones(4, device="sim") * 3).sum().item() == 12


def test_a_device_assertion_on_a_tensor_of_several_elements_is_refused_at_the_call():
    with pytest.raises(RuntimeError, match="needs a tensor of one element, got 2 elements"):
        torch._assert_async(torch.ones(2, device="sim"))


def test_with_sim_launch_blocking_the_failing_launch_raises_itself():
    program = ("import torch, torch_sim\n"
               "flag = torch.zeros((), device='sim')\n"
               "try:\n"
               "    torch._assert_async(flag, 'flag unset')\n"
               "except RuntimeError as error:\n"
               "    print('raised at the launch:', 'flag unset' in str(error))\n")
    result = run_forked(["-c", program], SIM_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "raised at the launch: True"


def test_with_sim_launch_blocking_python_host_kernels_and_another_threads_launches_all_finish():
    # A Python host kernel takes the GIL on the executor; a blocking launch waits for the executor. Neither may
    # wait for the other: the launches here come through the operator bindings and through torch.ops.
    program = ("import threading, torch, torch_sim\n"
               "x = torch.ones(64, device='sim')\n"
               "def host_kernels():\n"
               "    for _ in range(200):\n"
               "        torch.sim.run_host_kernel('python_kernel', lambda tensor: None, x)\n"
               "thread = threading.Thread(target=host_kernels)\n"
               "thread.start()\n"
               "y = x\n"
               "for _ in range(500):\n"
               "    y = torch.ops.aten.add.Tensor(y + x, x)\n"
               "thread.join()\n"
               "print(y[0].item())\n")
    result = run_forked(["-c", program], SIM_LAUNCH_BLOCKING="1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1001.0"


def test_what_a_launch_held_for_python_is_released_by_a_host_thread_not_the_device():
    # A launch carries the caller's thread-local state, here Python's saved-tensor hooks. When the launch holds
    # their last reference, releasing it takes the GIL: on the executor it would wait for the host thread, which
    # holds the GIL while it waits for the executor (.item()), and both would wait forever. A TensorIterator's loop
    # (x * x) calls no operator, so its launch carries no state and holds nothing of Python's.
    program = ("import threading, weakref, torch, torch_sim\n"
               "x = torch.ones(1024, device='sim')\n"
               "y = torch.ones(1024, device='sim')\n"
               "x * x\n"
               "torch._foreach_mul_([y], 1.0)\n"
               "released_on = []\n"
               "def hooked(launch):\n"
               "    def pack(t): return t\n"
               "    def unpack(t): return t\n"
               "    hook = weakref.ref(pack, lambda _: released_on.append(threading.get_native_id()))\n"
               "    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n"
               "        result = launch()\n"
               "    return hook, result\n"
               "sleep = torch.sim.device_sleep(20_000)\n"
               "loop_hook, z = hooked(lambda: x * x)\n"
               "update_hook, _ = hooked(lambda: torch._foreach_mul_([y], 2.0))\n"
               "print('queued:', not torch.sim.current_stream().query())\n"
               "print('held by the queued loop:', loop_hook() is not None)\n"
               "print('held by the queued update:', update_hook() is not None)\n"
               "sleep.wake()\n"
               "print('values:', z.sum().item(), y.sum().item())\n"
               "torch.sim.synchronize()\n"
               "print('released on the calling thread:', released_on == [threading.get_native_id()] * 2)\n")
    result = run_forked(["-c", program], timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["queued: True", "held by the queued loop: False",
                                          "held by the queued update: True", "values: 1024.0 2048.0",
                                          "released on the calling thread: True"]
