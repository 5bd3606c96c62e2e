"""Step 15, graphs: capture on a side stream records, replay computes, bit for bit as eager steps do."""
from __future__ import annotations

import json
import threading

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from pu1_explorer.guide import find_step, run_check
from torch_sim.steps import GUIDE

REFUSAL = "operation not permitted when stream is capturing"


def capture(work, graph=None, **graph_arguments):
    """Capture `work()` on a new side stream into `graph` (a new one by default); returns the graph and its result."""
    graph = graph if graph is not None else torch.accelerator.Graph(**graph_arguments)
    with torch.Stream(device="sim"), graph:
        result = work()
    return graph, result


def test_the_check_fails_before_the_step_and_replays_after_it():
    step = find_step(GUIDE, "graphs")
    before, after = run_check(step, "distributed"), run_check(step, "graphs")
    assert "Graph is not supported on device type: sim" in before.summary
    assert after.succeeded and "[2.0, 2.0, 2.0, 2.0]" in after.output


def test_results_appear_only_at_replay_and_each_replay_reads_the_inputs_anew():
    x = torch.full((3,), 2.0, device="sim")
    graph, y = capture(lambda: x * 3 + 1)
    assert torch.sim.memory_stats()["graph_pools.current"] >= 1
    x_before = x.clone()
    graph.replay()
    assert y.tolist() == [7.0, 7.0, 7.0] and torch.equal(x, x_before)
    x.fill_(1.0)
    graph.replay()
    assert y.tolist() == [4.0, 4.0, 4.0]


def test_a_captured_region_does_not_run_at_capture():
    x = torch.zeros(4, device="sim")
    graph, _ = capture(lambda: x.add_(1))
    assert x.tolist() == [0.0] * 4, "the capture ran the kernel"
    graph.replay()
    graph.replay()
    assert x.tolist() == [2.0] * 4


def test_is_stream_capturing_answers_during_capture_only():
    graph = torch.accelerator.Graph()
    seen = []
    with torch.Stream(device="sim"):
        graph.capture_begin()
        seen.append((torch.accelerator.current_stream().is_capturing(), torch.sim.is_current_stream_capturing()))
        with pytest.warns(UserWarning, match="The sim graph is empty"):
            graph.capture_end()
        seen.append((torch.accelerator.current_stream().is_capturing(), torch.sim.is_current_stream_capturing()))
    assert seen == [(True, True), (False, False)]


def batches(count: int, width: int = 8):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, width, generator=generator), torch.randn(4, 2, generator=generator)) for _ in range(count)]


def small_model(device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)


def eager_training(device: str, make_optimizer, data) -> list[torch.Tensor]:
    model = small_model(device)
    optimizer = make_optimizer(model.parameters())
    for inputs, targets in data:
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(inputs.to(device)), targets.to(device)).backward()
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def captured_training(make_optimizer, data, warm_up: int = 2) -> list[torch.Tensor]:
    """PyTorch's whole-network recipe: warm up on a side stream, capture one step, replay it per batch."""
    model = small_model("sim")
    optimizer = make_optimizer(model.parameters())
    static_inputs = torch.empty(4, 8, device="sim")
    static_targets = torch.empty(4, 2, device="sim")
    side = torch.Stream(device="sim")
    side.wait_stream(torch.sim.current_stream())  # the model's parameters were written on the current stream
    with side:
        for inputs, targets in data[:warm_up]:
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(model(inputs.to("sim")), targets.to("sim")).backward()
            optimizer.step()
    torch.sim.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.accelerator.Graph()
    with side, graph:
        F.mse_loss(model(static_inputs), static_targets).backward()
        optimizer.step()
    for inputs, targets in data[warm_up:]:
        static_inputs.copy_(inputs)
        static_targets.copy_(targets)
        graph.replay()
    return [p.detach().cpu() for p in model.parameters()]


def assert_bit_identical(first: list[torch.Tensor], second: list[torch.Tensor]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert torch.equal(a, b), f"largest difference {(a - b).abs().max().item()}"


def test_a_captured_training_step_replayed_equals_eager_steps_on_sim_and_on_the_cpu():
    data = batches(7)

    def sgd(parameters):
        return torch.optim.SGD(parameters, lr=0.05, momentum=0.9)

    replayed = captured_training(sgd, data)
    assert_bit_identical(replayed, eager_training("sim", sgd, data))
    assert_bit_identical(replayed, eager_training("cpu", sgd, data))
    assert not torch.equal(replayed[0], small_model("cpu")[0].weight.detach()), "the replays changed nothing"


def test_a_captured_capturable_adamw_step_equals_eager_steps_on_sim():
    data = batches(6)

    def adamw(parameters):
        return torch.optim.AdamW(parameters, lr=0.01, capturable=True)

    assert_bit_identical(captured_training(adamw, data), eager_training("sim", adamw, data))


def transformer_training(captured: bool, data, dropout: float) -> list[torch.Tensor]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=dropout,
                                       batch_first=True).to("sim")
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9)
    static_inputs = torch.empty(2, 5, 16, device="sim")

    def step():
        optimizer.zero_grad(set_to_none=not captured)
        layer(static_inputs).pow(2).mean().backward()
        optimizer.step()

    side = torch.Stream(device="sim")
    side.wait_stream(torch.sim.current_stream())
    with side:  # the warm-up step, the same in both runs
        static_inputs.copy_(data[0])
        step()
    torch.sim.current_stream().wait_stream(side)
    torch.sim.manual_seed(7)  # the draws of the replays start where the eager steps' draws start
    if captured:
        optimizer.zero_grad(set_to_none=True)
        graph = torch.accelerator.Graph()
        with side, graph:
            layer(static_inputs).pow(2).mean().backward()
            optimizer.step()
        torch.sim.manual_seed(7)
    for inputs in data[1:]:
        static_inputs.copy_(inputs)
        if captured:
            graph.replay()
        else:
            side.wait_stream(torch.sim.current_stream())
            with side:
                step()
            torch.sim.current_stream().wait_stream(side)
    return [p.detach().cpu() for p in layer.parameters()]


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_a_captured_transformer_layer_step_equals_eager_steps(dropout):
    generator = torch.Generator().manual_seed(3)
    data = [torch.randn(2, 5, 16, generator=generator) for _ in range(4)]
    assert_bit_identical(transformer_training(True, data, dropout), transformer_training(False, data, dropout))


def test_a_captured_transformer_layer_step_equals_eager_steps_on_the_cpu():
    generator = torch.Generator().manual_seed(3)
    data = [torch.randn(2, 5, 16, generator=generator) for _ in range(4)]
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9)
    for inputs in data:
        optimizer.zero_grad(set_to_none=True)
        layer(inputs).pow(2).mean().backward()
        optimizer.step()
    assert_bit_identical(transformer_training(True, data, 0.0), [p.detach() for p in layer.parameters()])


@pytest.mark.usefixtures("settled_memory")
def test_two_graphs_share_a_pool_and_it_lives_until_both_are_reset():
    x = torch.ones(64, device="sim")
    first, doubled = capture(lambda: x * 2)
    second, tripled = capture(lambda: x * 3, pool=first.pool())
    assert second.pool() == first.pool()
    pools = torch.sim.memory_stats()["graph_pools.current"]
    first.reset()
    assert torch.sim.memory_stats()["graph_pools.current"] == pools, "the pool went with its first graph"
    second.replay()
    assert tripled.tolist() == [3.0] * 64
    second.reset()
    assert torch.sim.memory_stats()["graph_pools.current"] == pools - 1


def test_a_pool_handle_shares_one_pool_between_graphs():
    handle = torch.sim.graph_pool_handle()
    x = torch.ones(8, device="sim")
    first, _ = capture(lambda: x + 1, pool=handle)
    second, _ = capture(lambda: x + 2, pool=handle)
    assert first.pool() == second.pool() == handle


def test_a_graph_replays_from_another_thread():
    x = torch.arange(4.0, device="sim")
    graph, y = capture(lambda: x.exp())
    failures = []

    def replay():
        try:
            graph.replay()
        except Exception as error:  # reported to the test's thread below
            failures.append(error)

    worker = threading.Thread(target=replay)
    worker.start()
    worker.join()
    assert not failures and torch.equal(y.cpu(), torch.arange(4.0).exp())


def test_a_captured_region_with_a_fallback_operator_replays():
    x = torch.tensor([1.0, 4.0, 9.0], device="sim")
    torch.sim.reset_fallback_counts()
    graph, y = capture(lambda: torch.special.erfcx(x.sqrt()))  # erfcx has no sim kernel: the fallback serves it
    assert any("special_erfcx" in name for name in torch.sim.fallback_counts())
    graph.replay()
    assert torch.equal(y.cpu(), torch.special.erfcx(torch.tensor([1.0, 4.0, 9.0]).sqrt()))


@pytest.mark.usefixtures("settled_memory")
def test_the_pool_stays_reserved_across_replays_and_is_released_after_reset():
    torch.sim.empty_cache()
    baseline = torch.sim.memory_stats()["reserved_bytes.graph_pool.current"]
    x = torch.ones(256, 256, device="sim")
    graph, y = capture(lambda: (x * 2).sin())
    reserved = torch.sim.memory_stats()["reserved_bytes.graph_pool.current"]
    assert reserved - baseline >= 2 * 256 * 256 * 4  # the intermediate and the output
    for _ in range(3):
        graph.replay()
        assert torch.sim.memory_stats()["reserved_bytes.graph_pool.current"] == reserved
    graph.reset()
    del y
    assert torch.sim.memory_stats()["reserved_bytes.graph_pool.current"] == baseline
    before = torch.sim.memory_stats()["reserved_bytes.all.current"]
    torch.sim.empty_cache()
    assert torch.sim.memory_stats()["reserved_bytes.all.current"] < before


def test_debug_dump_lists_kernels_and_the_tensors_they_read_and_write(tmp_path):
    x = torch.ones(64, 64, device="sim")
    graph = torch.accelerator.Graph()
    graph.enable_debug_mode()
    capture(lambda: x.mul(2).add_(1), graph=graph)
    path = tmp_path / "graph.json"
    graph.debug_dump(str(path))
    dump = json.loads(path.read_text())
    assert dump["device"] == "sim:0" and dump["pool"] == list(graph.pool())
    mul, add = dump["kernels"]
    assert (mul["index"], mul["operator"], mul["kernel"]) == (0, "aten::mul.Tensor", "sim::mul.Tensor")
    assert add["operator"] == "aten::add_.Tensor"
    assert mul["reads"][0] == {"id": "t0", "address": hex(x.data_ptr()), "shape": [64, 64], "dtype": "float32"}
    assert mul["writes"][0]["id"] == "t1" and add["writes"][0]["id"] == "t1" and add["reads"] == []


def test_keep_graph_instantiates_on_demand():
    x = torch.ones(2, device="sim")
    graph, y = capture(lambda: x + 1, keep_graph=True)
    graph.instantiate()
    graph.replay()
    assert y.tolist() == [2.0, 2.0]
    plain, _ = capture(lambda: x + 1)
    with pytest.raises(RuntimeError, match="keep_graph=True"):
        plain.instantiate()


def test_a_replay_before_any_capture_is_refused():
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        torch.accelerator.Graph().replay()


def test_capture_on_the_default_stream_is_refused():
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        with torch.accelerator.Graph():
            pass
    assert not torch.sim.is_current_stream_capturing()


def refused_capture(work, match: str) -> RuntimeError:
    """`work` inside a capture fails it with `match`, and the stream works eagerly afterwards; returns the error."""
    side = torch.Stream(device="sim")
    with pytest.raises(RuntimeError, match=match) as refusal:
        with side, torch.accelerator.Graph():
            work()
    with side:
        assert not torch.sim.is_current_stream_capturing()
        assert torch.ones(3, device="sim").sum().item() == 3.0, "the stream is unusable after the refusal"
    return refusal.value


def test_item_on_the_capturing_stream_is_refused():
    x = torch.ones(3, device="sim")
    refused_capture(lambda: x.sum().item(), f"{REFUSAL}: aten::_local_scalar_dense")


def test_synchronize_of_the_capturing_stream_is_refused():
    refused_capture(lambda: torch.accelerator.current_stream().synchronize(), f"{REFUSAL}: synchronizing")


def test_synchronize_of_the_device_is_refused():
    refused_capture(lambda: torch.accelerator.synchronize(), f"{REFUSAL}: synchronizing")
    refused_capture(lambda: torch.sim.synchronize(), f"{REFUSAL}: synchronizing")


def test_a_copy_from_pageable_memory_is_refused_and_from_pinned_memory_captured():
    x = torch.zeros(4, device="sim")
    refused_capture(lambda: x.copy_(torch.ones(4)), f"{REFUSAL}: a copy from pageable host memory")
    pinned = torch.ones(4).pin_memory()
    graph, _ = capture(lambda: x.copy_(pinned, non_blocking=True))
    assert x.tolist() == [0.0] * 4
    pinned.fill_(5.0)
    graph.replay()
    assert x.tolist() == [5.0] * 4


def test_a_copy_to_pageable_memory_is_refused():
    x = torch.ones(4, device="sim")
    refused_capture(lambda: x.cpu(), f"{REFUSAL}: a copy to pageable host memory")


def test_an_operator_whose_output_shape_depends_on_data_is_refused():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="sim")
    refused_capture(lambda: torch.nonzero(x), f"{REFUSAL}: aten::nonzero cannot be captured")


def test_a_captured_convolution_forward_and_backward_equals_eager():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1).to("sim")
    static_inputs = torch.randn(2, 3, 8, 8, device="sim")
    side = torch.Stream(device="sim")
    side.wait_stream(torch.sim.current_stream())
    with side:  # the warm-up runs on the stream the capture uses, as autograd requires
        conv(static_inputs).square().sum().backward()
        eager_output, eager_grad = conv(static_inputs).detach().cpu(), conv.weight.grad.cpu()
    torch.sim.current_stream().wait_stream(side)
    conv.weight.grad = None
    graph = torch.accelerator.Graph()
    with side, graph:
        output = conv(static_inputs)
        output.square().sum().backward()
    graph.replay()
    assert torch.equal(output.detach().cpu(), eager_output) and torch.equal(conv.weight.grad.cpu(), eager_grad)


@pytest.mark.usefixtures("settled_memory")
def test_blocks_freed_during_a_capture_serve_its_later_allocations():
    torch.sim.empty_cache()
    before = torch.sim.memory_stats()["reserved_bytes.graph_pool.current"]
    x = torch.ones(128, 128, device="sim")

    def chain():
        y = x
        for _ in range(50):
            y = y * 1.01
        return y

    graph, y = capture(chain)
    reserved = torch.sim.memory_stats()["reserved_bytes.graph_pool.current"] - before
    assert reserved <= 3 * 128 * 128 * 4, f"{reserved} bytes reserved for a chain of 50 multiplies"
    graph.replay()
    assert torch.equal(y.cpu(), chain().cpu()), "the replay differs from the same chain run eagerly"


def test_random_operators_draw_anew_at_each_replay_as_eager_calls_do():
    graph, noise = capture(lambda: torch.randn(5, device="sim"))
    torch.sim.manual_seed(11)
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append(noise.cpu().clone())
    torch.sim.manual_seed(11)
    eager = [torch.randn(5, device="sim").cpu() for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(replays, eager)) and not torch.equal(replays[0], replays[1])


def test_a_capture_on_the_second_device_replays_there():
    with torch.sim.device(1):
        x = torch.ones(3, device="sim:1")
        graph, y = capture(lambda: x + 1)
    graph.replay()  # from sim:0, the current device here
    assert y.device == torch.device("sim:1") and y.tolist() == [2.0, 2.0, 2.0]


def test_torch_sim_graph_captures_on_a_side_stream_of_its_own_into_a_shared_pool():
    x = torch.ones(2, device="sim")
    first = torch.accelerator.Graph()
    with torch.sim.graph(first):
        assert torch.sim.is_current_stream_capturing() and torch.accelerator.current_stream().stream_id != 0
        y = x * 5
    second = torch.accelerator.Graph()
    with torch.sim.graph(second, pool=first.pool()):
        z = y + 1
    first.replay()
    second.replay()
    assert z.tolist() == [6.0, 6.0] and second.pool() == first.pool()


def test_a_host_tensor_argument_is_refused():
    x = torch.arange(4.0, device="sim")
    refused_capture(lambda: x[torch.tensor([0, 2])], f"{REFUSAL}: aten::index.Tensor reads a host tensor")


def test_capture_must_end_on_the_stream_it_began_on():
    graph = torch.accelerator.Graph()
    first, second = torch.Stream(device="sim"), torch.Stream(device="sim")
    with first:
        graph.capture_begin()
    with second, pytest.raises(RuntimeError, match="Capture must end on the stream it began on"):
        graph.capture_end()
    with first:
        with pytest.warns(UserWarning, match="The sim graph is empty"):
            graph.capture_end()


def the_first_line(error: BaseException) -> str:
    """The refusal as the user reads it: the error raised inside the capture, whatever capture_end added to it."""
    while error.__context__ is not None:
        error = error.__context__
    return str(error)


def test_a_collective_in_a_capture_is_refused_with_one_clear_line():
    dist.init_process_group("simccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = torch.ones(4, device="sim")
        error = refused_capture(lambda: dist.all_reduce(x), f"{REFUSAL}: simccl's all_reduce runs at once")
        message = the_first_line(error)
        assert "\n" not in message and "run collectives outside the capture" in message, message
        refused_capture(lambda: dist.broadcast(x, src=0), f"{REFUSAL}: simccl's broadcast runs at once")
        dist.all_reduce(x)  # outside a capture the collective runs
        assert x.tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()


def test_a_compiled_function_in_a_capture_is_refused():
    compiled = torch.compile(lambda t: t * 2 + 1)
    x = torch.ones(4, device="sim")
    assert compiled(x).tolist() == [3.0] * 4
    error = refused_capture(lambda: compiled(x), f"{REFUSAL}: a function compiled by torch.compile")
    assert "\n" not in the_first_line(error)
    assert compiled(x).tolist() == [3.0] * 4, "the compiled function fails only inside a capture"
