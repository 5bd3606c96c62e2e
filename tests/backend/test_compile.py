"""Step 13, compile: torch.compile with its default backend, inductor, generates kernels for sim."""
from __future__ import annotations

import os
import subprocess
import warnings
import sys

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor import metrics
from torch._inductor.utils import run_and_get_code


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.compiler.reset()
    metrics.reset()
    counters.clear()
    yield
    torch.compiler.reset()


def small_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))


def test_compiled_training_step_matches_eager_and_inductor_generates_kernels():
    eager, compiled = small_mlp().to("sim"), small_mlp().to("sim")
    inputs = torch.randn(8, 16).to("sim")
    eager(inputs).square().mean().backward()
    torch.compile(compiled)(inputs).square().mean().backward()
    assert metrics.generated_kernel_count > 0
    for mine, theirs in zip(compiled.parameters(), eager.parameters()):
        assert mine.grad.device.type == "sim"
        torch.testing.assert_close(mine.grad.cpu(), theirs.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_inductor_writes_cpp_kernels_that_run_on_sim_memory():
    def scale_and_relu(x):
        return (x * 2).relu() + 1

    x = torch.randn(64, device="sim")
    result, (code,) = run_and_get_code(torch.compile(scale_and_relu), x)
    assert "cpp_fused" in code and "device='sim'" in code
    assert result.device.type == "sim"
    assert torch.equal(result.cpu(), scale_and_relu(x.cpu()))


def test_graphs_that_create_sim_tensors_and_call_cpu_compile_with_fullgraph():
    def total_on_host(x):
        ones = torch.ones(x.shape, device="sim")
        return (ones * x).sum().cpu() + 1

    x = torch.randn(32, device="sim")
    result = torch.compile(total_on_host, fullgraph=True)(x)
    assert result.device.type == "cpu"
    torch.testing.assert_close(result, total_on_host(x))


def test_autocast_inside_compiled_code_follows_sims_policy():
    def matmul_under_autocast(a, b):
        with torch.autocast("sim", dtype=torch.bfloat16):
            return a @ b

    a, b = torch.randn(8, 8, device="sim"), torch.randn(8, 8, device="sim")
    compiled = torch.compile(matmul_under_autocast, fullgraph=True)(a, b)
    assert compiled.dtype == torch.bfloat16
    torch.testing.assert_close(compiled.cpu(), matmul_under_autocast(a, b).cpu())


def test_recompiles_only_when_the_shape_changes_then_goes_dynamic():
    compiled = torch.compile(lambda x: (x * 2).sin())
    for size in (3, 3, 5, 7, 9):
        x = torch.randn(size, device="sim")
        torch.testing.assert_close(compiled(x).cpu(), (x * 2).sin().cpu())
    # 3 compiles once, the second 3 reuses it, 5 recompiles with a dynamic size that 7 and 9 reuse
    assert counters["stats"]["unique_graphs"] == 2


def test_a_compiled_function_refuses_tensors_on_two_devices_like_eager():
    with pytest.raises(Exception, match="(?s)Expected all tensors to be on the same device.*sim"):
        torch.compile(torch.add)(torch.ones(3, device="sim"), torch.ones(3))


def test_compiled_transformer_layer_forward_and_backward_match_eager():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to("sim")
    tokens = torch.randn(2, 6, 32, device="sim")
    compiled = torch.compile(layer)(tokens)
    compiled.square().mean().backward()
    compiled_grads = [p.grad.cpu() for p in layer.parameters()]
    layer.zero_grad()
    eager = layer(tokens)
    eager.square().mean().backward()
    torch.testing.assert_close(compiled.detach().cpu(), eager.detach().cpu(), rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(compiled_grads, (p.grad.cpu() for p in layer.parameters())):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert metrics.generated_kernel_count > 0


def test_compiled_embedding_and_transformer_training_step_matches_eager():
    from pu1_explorer import workloads

    losses = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = workloads.WORKLOADS["transformer"].make_model().to("sim")
        tokens, labels = workloads.WORKLOADS["transformer"].make_batch(torch.Generator().manual_seed(0))
        run = torch.compile(model) if compiled else model
        loss = torch.nn.functional.cross_entropy(run(tokens.to("sim")), labels.to("sim"))
        loss.backward()
        losses[compiled] = (loss.item(), model.embedding.weight.grad.cpu())
    assert losses[True][0] == pytest.approx(losses[False][0], rel=1e-5)
    torch.testing.assert_close(losses[True][1], losses[False][1], rtol=1e-4, atol=1e-6)


def test_inductor_finds_sims_classes_on_the_device_module():
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    init_backend_registration()
    assert get_scheduling_for_device("sim") is torch.sim.Scheduling
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        torch.sim.NoSuchThing


def test_the_tracer_sees_that_compiled_code_dispatches_only_allocations_and_extern_kernels():
    from pu1_explorer import trace

    model = small_mlp().to("sim")
    compiled = torch.compile(model)
    batch = torch.randn(8, 16, device="sim")
    with torch.no_grad():
        compiled(batch)
        with trace("sim") as eager:
            model(batch)
        with trace("sim") as fused:
            compiled(batch)
    reached = {name: {hop.operator for hop in recorded.hops if hop.key == "PrivateUse1"}
               for name, recorded in (("eager", eager), ("compiled", fused))}
    assert {"aten::gelu", "aten::native_layer_norm"} <= reached["eager"]
    assert "aten::empty_strided" in reached["compiled"]
    assert not {"aten::gelu", "aten::native_layer_norm"} & reached["compiled"]


@pytest.mark.parametrize("first_import", ["import torch", "import torch._dynamo"])
def test_dynamo_knows_sims_device_interface_before_anything_compiles(first_import):
    program = (f"{first_import}\nimport sys\n"
               "print('torch._dynamo' in sys.modules)\n"
               "from torch._dynamo.device_interface import get_interface_for_device\n"
               "interface = get_interface_for_device('sim')\n"
               "print(interface.device_count() == torch.sim.device_count(), interface.is_available())\n"
               "print('torch._inductor.codegen.cpp' in sys.modules)")
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    dynamo_loaded_at_start, answers, inductor_codegen_loaded = completed.stdout.split("\n")[:3]
    assert dynamo_loaded_at_start == str(first_import == "import torch._dynamo")  # `import torch` stays light
    assert answers == "True True"
    assert inductor_codegen_loaded == "False"


@pytest.mark.parametrize("training", [True, False], ids=["training", "no_grad"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["contiguous", "nhwc"])
def test_compiled_conv2d_matches_eager_in_either_memory_format(memory_format, training):
    """sim's convolutions return contiguous outputs and gradients, the strides torch's fake kernels predict for a
    PrivateUse1 device and inductor asserts (under no_grad it turns the inputs channels-last itself)."""
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
    model = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2).to("sim", memory_format=memory_format)
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 16, 16).to(memory_format=memory_format)
    with torch.set_grad_enabled(training):
        eager = model(x.to("sim"))
        compiled = torch.compile(model)(x.to("sim"))
        expected = reference(x)
    assert eager.is_contiguous() and compiled.device.type == "sim"
    torch.testing.assert_close(compiled.cpu(), expected, rtol=1e-4, atol=1e-5)
    if training:
        compiled.square().sum().backward()
        expected.square().sum().backward()
        for mine, theirs in ((model.weight, reference.weight), (model.bias, reference.bias)):
            assert mine.grad.device.type == "sim"
            torch.testing.assert_close(mine.grad.cpu(), theirs.grad, rtol=1e-4, atol=1e-4)


def test_the_backend_named_sim_runs_dynamos_graph_on_sims_kernels_like_eager():
    """`torch.compile(model, backend="sim")` finds sim's function through the torch_dynamo_backends entry point; it
    gets one graph from dynamo and runs it on sim's kernels without generating code, so the loss and every gradient
    equal eager's, bit for bit."""
    from torch_sim.compile import dynamo_backend

    compiled_model, eager_model = small_mlp().to("sim"), small_mlp().to("sim")
    batch = torch.randn(8, 16, device="sim")
    compiled_loss = torch.compile(compiled_model, backend="sim")(batch).square().mean()
    compiled_loss.backward()
    eager_loss = eager_model(batch).square().mean()
    eager_loss.backward()
    assert torch._dynamo.lookup_backend("sim") is dynamo_backend
    assert counters["stats"]["unique_graphs"] == 1 and metrics.generated_kernel_count == 0
    assert compiled_loss.device.type == "sim" and torch.equal(compiled_loss.cpu(), eager_loss.cpu())
    for compiled, eager in zip(compiled_model.parameters(), eager_model.parameters()):
        assert compiled.grad.device.type == "sim" and torch.equal(compiled.grad.cpu(), eager.grad.cpu())


def test_the_backend_named_sim_refuses_a_graph_input_on_another_device():
    compiled = torch.compile(lambda x: x * 2, backend="sim")
    with pytest.raises(Exception, match="runs graphs of sim and CPU tensors, but the input .* is on meta: move it "
                                        "to sim, or pick a backend for meta"):
        compiled(torch.ones(3, device="meta"))


def test_a_function_compiled_for_the_second_device_returns_its_results_there():
    """Inductor writes a buffer's device type alone and leaves the index to a device guard it writes only for GPU
    types; sim's wrapper writes the whole device."""
    x = torch.randn(8, device="sim:1")
    with torch._inductor.config.patch(force_disable_caches=True):
        result, (code,) = run_and_get_code(torch.compile(lambda t: (t * 2).relu() + 1), x)
    assert "device='sim:1'" in code
    assert result.device == torch.device("sim:1")
    assert torch.equal(result.cpu(), ((x * 2).relu() + 1).cpu())


# What torch 2.13 asks sim's compile classes (interface `compile` of sim's trace) while it compiles a training step,
# a function on the second device, autocast and the backend named sim: guide page 13 tables these, and lists sim's
# answers to dynamo's DeviceInterface (`is_available`, `device_count`, `current_device`, `set_device`,
# `synchronize`) and its op overrides (`set_device`, `synchronize`, `device_guard`) apart, since nothing asks them.
# Each code generation asks the first group; the others are asked once per process and then remembered.
ASKED_FOR_EACH_GRAPH = {
    "SimScheduling.codegen_node", "SimWrapperCodegen.create", "SimWrapperCodegen.generate_kernel_call",
    "SimWrapperCodegen.wrap_kernel_call",
    "SimWrapperCodegen.make_allocation", "SimWrapperCodegen.write_launcher_fn_call_get_indent"}
ASKED_ONCE = {"Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen",
              "SimInterface.get_device_properties", "SimInterface.get_compute_capability"}


def test_compiling_asks_sims_compile_classes_what_guide_page_13_tables():
    torch.sim.start_interface_trace()
    try:
        with torch._inductor.config.patch(force_disable_caches=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # force_disable_caches warns that it turns dynamo's profile off
            model = small_mlp().to("sim")
            torch.compile(model)(torch.randn(4, 16, device="sim")).sum().backward()
            torch.compile(lambda t: (t * 2).relu() + 1)(torch.randn(8, device="sim:1"))

            @torch.compile
            def matmul_under_autocast(a):
                with torch.autocast("sim", dtype=torch.bfloat16):
                    return a @ a

            matmul_under_autocast(torch.randn(4, 4, device="sim"))
            torch.compile(model, backend="sim")(torch.randn(4, 16, device="sim"))
    finally:
        calls = torch.sim.stop_interface_trace()
    asked = {call["method"] for call in calls if call["interface"] == "compile"}
    assert ASKED_FOR_EACH_GRAPH <= asked <= ASKED_FOR_EACH_GRAPH | ASKED_ONCE


def test_the_compile_caches_are_keyed_on_sims_code_generation_beside_the_users_tag():
    # Inductor's cache keys cover torch's sources, not sim's code generation: without the tag, code an older sim
    # generated is loaded again after an upgrade.
    program = ("import torch, torch._dynamo\n"
               "from torch_sim.compile import codegen_tag\n"
               "print(torch.compiler.config.cache_key_tag == 'mine+' + codegen_tag())\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "TORCH_COMPILE_CACHE_KEY_TAG": "mine"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
