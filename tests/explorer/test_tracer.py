"""The tracer: hops in order, nesting, skipped fallthroughs, faithfulness and table restoration."""
import json
from pathlib import Path

import jsonschema
import pytest
import torch

import pu1_explorer
from torch_sim import workloads
from pu1_explorer import trace
from pu1_explorer.boxed import native_helper


def all_tables():
    return {name: torch._C._dispatch_dump_table(name) for name in torch._C._dispatch_get_all_op_names()}


def hops_of(recorded, operator):
    return [hop for hop in recorded.hops if hop.operator == operator]


def test_forward_and_backward_hops_in_order():
    x = torch.randn(4, 8, device="sim", requires_grad=True)
    with trace("sim") as recorded:
        (x * 2).sum().backward()
    mul = hops_of(recorded, "aten::mul.Tensor")
    assert [hop.key for hop in mul if not hop.skipped][:3] == ["AutogradPrivateUse1", "PrivateUse1", "CPU"]
    assert mul[0].phase == "forward"
    assert any(hop.phase == "backward" for hop in recorded.hops)
    starts = [hop.start_ns for hop in recorded.hops]
    assert starts == sorted(starts)


def test_nesting_follows_the_calls():
    x = torch.randn(4, 8, device="sim")
    w = torch.randn(3, 8, device="sim")
    with trace("sim") as recorded:
        torch.nn.functional.linear(x, w)
    linear = recorded.hops[0]
    assert linear.operator == "aten::linear" and linear.kind == "composite_implicit" and linear.depth == 0
    children = {hop.operator for hop in recorded.children(linear.index)}
    assert {"aten::t", "aten::matmul"} <= children  # no bias: linear decomposes into t and matmul
    for hop in recorded.hops[1:]:
        assert hop.parent is not None and recorded.hops[hop.parent].depth == hop.depth - 1


def test_fallthrough_keys_are_marked_skipped():
    x = torch.randn(3, device="sim", requires_grad=True)
    with trace("sim") as recorded:
        x.sum()
    skipped = [hop for hop in hops_of(recorded, "aten::sum") if hop.skipped]
    assert "ADInplaceOrView" in {hop.key for hop in skipped}
    assert all(hop.kind == "fallthrough" and hop.duration_ns == 0 for hop in skipped)


def test_fallback_hops_show_the_host_kernel_underneath():
    x = torch.rand(5, device="sim")
    with trace("sim") as recorded:
        torch.special.erfcx(x)
    fallback = next(hop for hop in recorded.hops if hop.kind == "fallback")
    assert fallback.operator == "aten::special_erfcx.out" and fallback.key == "PrivateUse1"
    assert recorded.children(fallback.index)[0].key == "CPU"


def test_inplace_view_and_autocast_hops():
    x = torch.randn(4, 4, device="sim", requires_grad=True)
    with trace("sim") as recorded:
        y = x.clone()
        y.add_(1)
        y.view(16)
        with torch.autocast("sim", dtype=torch.bfloat16):
            x @ x
    assert any(hop.key == "ADInplaceOrView" and not hop.skipped for hop in hops_of(recorded, "aten::add_.Tensor"))
    assert any(hop.key == "ADInplaceOrView" and not hop.skipped for hop in hops_of(recorded, "aten::view"))
    autocast = [hop for hop in recorded.hops if hop.key == "AutocastPrivateUse1" and not hop.skipped]
    assert autocast and autocast[0].operator in ("aten::matmul", "aten::mm")


def test_input_metadata_is_recorded():
    x = torch.zeros(2, 3, dtype=torch.float64, device="sim:1")
    with trace("sim") as recorded:
        x.neg()
    hop = next(hop for hop in recorded.hops if hop.operator == "aten::neg" and not hop.skipped)
    assert hop.inputs[0].shape == [2, 3] and hop.inputs[0].dtype == "torch.float64"
    assert hop.inputs[0].device == "sim:1"


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_tracing_is_faithful_bit_for_bit(device):
    def run():
        torch.manual_seed(0)
        model = workloads.small_mlp().to(device)
        inputs = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)).to(device)
        loss = model(inputs).square().mean()
        loss.backward()
        return loss.detach().cpu(), [p.grad.cpu() for p in model.parameters()]

    plain_loss, plain_grads = run()
    with trace(device) as recorded:
        traced_loss, traced_grads = run()
    assert len(recorded.hops) > 50
    assert torch.equal(plain_loss, traced_loss)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, traced_grads))


def test_tables_are_restored_after_the_block():
    before = all_tables()
    with trace("sim"):
        torch.ones(2, device="sim") + 1
    assert all_tables() == before


def test_tables_are_restored_after_an_exception():
    before = all_tables()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        with trace("sim") as recorded:
            torch.ones(2, device="sim:0") + torch.ones(2, device="sim:1")
    assert all_tables() == before
    assert recorded.error.startswith("RuntimeError")
    assert any(hop.error for hop in recorded.hops)


def test_json_export_follows_the_schema():
    with trace("sim") as recorded:
        torch.ones(3, device="sim").relu()
    schema = json.loads((Path(pu1_explorer.__file__).parent / "trace_schema.json").read_text())
    document = json.loads(recorded.to_json())
    jsonschema.validate(document, schema)
    assert document["hops"][0]["operator"] == recorded.hops[0].operator


def test_chrome_trace_and_text_tree():
    with trace("cpu") as recorded:
        torch.ones(3).relu()
    chrome = recorded.to_chrome_trace()
    complete = [event for event in chrome["traceEvents"] if event["ph"] == "X"]
    assert complete and all(event["dur"] >= 0 and "kind" in event["args"] for event in complete)
    text = recorded.to_text()
    assert text.splitlines()[0].startswith("aten::ones @ BackendSelect")
    assert "  aten::" in text
    assert "skipped" not in recorded.to_text(show_skipped=False)


def test_a_collective_on_sim_is_traced_to_the_device_kernel_and_the_tables_are_restored():
    import torch.distributed as dist

    dist.init_process_group("simccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        before = all_tables()
        tensor = torch.ones(3, device="sim")
        with trace("sim") as recorded:
            dist.all_reduce(tensor)
        assert all_tables() == before
    finally:
        dist.destroy_process_group()
    collective = hops_of(recorded, "c10d::allreduce_")
    assert [hop.key for hop in collective if not hop.skipped] == ["AutogradPrivateUse1", "PrivateUse1"]
    assert collective[0].inputs[0].device == "sim:0"
    assert tensor.tolist() == [1.0, 1.0, 1.0]


# ----------------------------------------------------------------- native recording
# The hops are recorded by C++ kernels (pu1_explorer._native.HopRecorder); the original
# recording with Python kernels stays as the reference they must agree with.
from pu1_explorer import tracer as tracer_module  # noqa: E402
from pu1_explorer.dispatch_table import FALLTHROUGH, MISSING, entry_from_dump  # noqa: E402


def recorded_with(native, device, program):
    """Run `program` (which builds its own inputs) under a trace recorded natively or in Python."""
    tracer = tracer_module.Tracer(device, native=native)
    tracer.install()
    try:
        program()
    except Exception:  # the programs that fail on purpose; the trace keeps the error
        pass
    finally:
        tracer.uninstall()
    return tracer.trace


def comparable(recorded):
    return [(hop.index, hop.operator, hop.key, hop.kind, hop.depth, hop.parent, hop.phase, hop.skipped, hop.keyset,
             hop.provenance, [(t.shape, t.dtype, t.device) for t in hop.inputs], hop.error) for hop in recorded.hops]


def backward_of_a_product():
    x = torch.randn(4, 8, device="sim", requires_grad=True)
    (x * 2).sum().backward()


def mlp_forward_backward(device):
    def program():
        torch.manual_seed(0)
        model = workloads.small_mlp().to(device)
        model(torch.randn(8, 64, device=device)).square().mean().backward()
    return program


def wrapped_numbers():
    x = torch.randn(5, device="sim", requires_grad=True)
    (torch.copysign(x, -1.0) + torch.fmod(x, 0.7) + x * 2.0).sum().backward()


def views_inplace_and_autocast():
    x = torch.randn(4, 4, device="sim", requires_grad=True)
    y = x.clone()
    y.add_(1)
    y.view(16)
    torch.nn.functional.linear(x, x)
    with torch.autocast("sim", dtype=torch.bfloat16):
        x @ x


def a_kernel_that_fails():
    torch.ones(2, device="sim") + 1
    torch.ones(2, device="sim:0") + torch.ones(2, device="sim:1")


PROGRAMS = {
    "backward": ("sim", backward_of_a_product),
    "mlp-sim": ("sim", mlp_forward_backward("sim")),
    "mlp-cpu": ("cpu", mlp_forward_backward("cpu")),
    "wrapped-numbers": ("sim", wrapped_numbers),
    "views-inplace-autocast": ("sim", views_inplace_and_autocast),
    "error": ("sim", a_kernel_that_fails),
}


def test_native_recording_is_the_default():
    assert tracer_module.native_recording_available()
    assert tracer_module.Tracer("sim").native


@pytest.mark.parametrize("name", PROGRAMS)
def test_native_and_python_recordings_agree_hop_for_hop(name):
    """Operator, key, kind, depth, parent, phase, skipped, key set, provenance, inputs and error of every hop."""
    device, program = PROGRAMS[name]
    native = recorded_with(True, device, program)
    python = recorded_with(False, device, program)
    assert len(native.hops) > 5
    assert comparable(native) == comparable(python)
    assert native.wrapped_operators == python.wrapped_operators


def test_wrapped_number_scalars_reach_the_kernels_as_tensors():
    x = torch.tensor([1.0, -2.0, 3.0], device="sim")
    with trace("sim") as recorded:
        signs = torch.copysign(x, -1.0)
        remainders = torch.fmod(x, 0.7)
        doubled = x * 2.0
    assert signs.tolist() == [-1.0, -2.0, -3.0] and doubled.tolist() == [2.0, -4.0, 6.0]
    assert torch.allclose(remainders.cpu(), torch.fmod(x.cpu(), 0.7))
    copysign = next(hop for hop in recorded.hops if hop.operator == "aten::copysign.Tensor" and not hop.skipped)
    assert [(t.shape, t.dtype, t.device) for t in copysign.inputs] == [([3], "torch.float32", "sim:0"),
                                                                      ([], "torch.float64", "cpu")]


def test_an_exception_inside_a_kernel_is_recorded_and_the_tables_restored():
    before = all_tables()
    with pytest.raises(RuntimeError, match="same device"):
        with trace("sim") as recorded:
            torch.ones(2, device="sim:0") + torch.ones(2, device="sim:1")
    assert all_tables() == before
    failed = [hop for hop in recorded.hops if hop.error]
    assert failed and all(hop.error.startswith("RuntimeError: Expected all tensors to be on the same device")
                          for hop in failed)
    assert failed[0].depth == 0 and failed[0].duration_ns > 0
    with trace("sim") as again:  # the tracer is usable after an error
        torch.ones(2, device="sim") + 1
    assert again.operators()[-1] == "aten::add.Tensor"


def test_a_python_exception_inside_a_kernel_keeps_its_type():
    library = torch.library.Library("aten", "IMPL")
    try:
        def refuse(*arguments, **keyword_arguments):
            raise ValueError("erfcx is not for today\nsecond line")

        library.impl("special_erfcx", refuse, "PrivateUse1")
        hops = {}
        for native in (True, False):
            hops[native] = [hop.error for hop in recorded_with(native, "sim", lambda: torch.special.erfcx(
                torch.ones(2, device="sim"))).hops if hop.error]
    finally:
        library._destroy()
    assert hops[True] == hops[False] and hops[True][-1] == "ValueError: erfcx is not for today"


@pytest.mark.parametrize("native", [True, False])
def test_nested_traces_are_refused_clearly(native):
    before = all_tables()
    with trace("sim") as outer:
        with pytest.raises(RuntimeError, match="a trace is already active"):
            with trace("sim"):
                pass
        with pytest.raises(RuntimeError, match="already active"):
            tracer_module.Tracer("cpu", native=native).install()
        torch.ones(2, device="sim").neg()
    assert all_tables() == before
    assert "aten::neg" in outer.operators()
    with trace("sim"):  # and the next trace may start
        pass


@pytest.mark.parametrize("native", [True, False])
def test_each_recording_restores_the_tables_exactly(native):
    before = all_tables()
    recorded_with(native, "sim", backward_of_a_product)
    recorded_with(native, "cpu", mlp_forward_backward("cpu"))
    assert all_tables() == before


def test_hops_can_be_read_while_the_trace_runs():
    x = torch.randn(3, device="sim")
    with trace("sim") as recorded:
        x.neg()
        seen = len(recorded.hops)
        x.exp()
        assert len(recorded.hops) > seen > 0
        early = recorded.hops[0]
    assert early is recorded.hops[0] and early.duration_ns > 0
    assert [hop.index for hop in recorded.hops] == list(range(len(recorded.hops)))


def test_the_native_plan_matches_the_dispatch_table_dumps():
    """Every wrapped (operator, key) and its kind and provenance, as the dumps give them, for sim's keys."""
    keys = tracer_module.TRACE_KEYS["privateuse1"]
    recorder = native_helper().HopRecorder(list(tracer_module.TRACED_NAMESPACES),
                                                   sorted(tracer_module.UNTRACED_OPERATORS), list(keys))
    collector = tracer_module._NativeHops(recorder, tracer_module.Trace(), {})
    native = {site[:2]: collector._site_entry(index) for index, site in enumerate(recorder.sites())}
    expected = {}
    for operator in torch._C._dispatch_get_all_op_names():
        if operator.split("::")[0] not in tracer_module.TRACED_NAMESPACES or operator in tracer_module.UNTRACED_OPERATORS:
            continue
        dump = torch._C._dispatch_dump_table(operator)
        for key in keys:
            entry = entry_from_dump(operator, dump, key)
            if entry.kind not in (FALLTHROUGH, MISSING):
                expected[operator, key] = (entry.kind, entry.provenance)
        for key in ("ADInplaceOrView", "BackendSelect", "AutocastCPU", "Python", "Functionalize"):
            assert native_helper().computed_is_fallthrough(operator, key) == (
                entry_from_dump(operator, dump, key).kind == FALLTHROUGH), (operator, key)
    assert native == expected


def test_a_kernel_registered_between_traces_is_seen_by_the_next_trace():
    """No stale plan: what a bring-up step registers shows in the very next trace, and leaves with it."""
    def erfcx():
        torch.special.erfcx(torch.rand(3, device="sim"))

    def reached(recorded):
        return {(hop.operator, hop.kind) for hop in recorded.hops if hop.key == "PrivateUse1" and not hop.skipped}

    assert ("aten::special_erfcx.out", "fallback") in reached(recorded_with(True, "sim", erfcx))
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("special_erfcx", lambda x: torch.zeros_like(x), "PrivateUse1")
        step = recorded_with(True, "sim", erfcx)
        assert ("aten::special_erfcx", "kernel") in reached(step)
        kernel = next(hop for hop in step.hops if hop.operator == "aten::special_erfcx" and hop.key == "PrivateUse1")
        assert kernel.provenance.startswith("tests/explorer/test_tracer.py:")
    finally:
        library._destroy()
    assert ("aten::special_erfcx.out", "fallback") in reached(recorded_with(True, "sim", erfcx))


BRING_UP_AND_TRACE = """
import torch_sim
import torch
from pu1_explorer import tracer

def program(device):
    # No backward before sim's steps are in: the autograd engine sizes its device queues at the first backward.
    def run():
        x = torch.ones(2, 3, device=device, requires_grad=device == "sim" and "autograd" in torch_sim.installed_steps())
        (x * 2.0).sum().backward() if x.requires_grad else (x * 2.0).sum()
    return run

def signature(recorded):
    return [(h.operator, h.key, h.kind, h.depth, h.parent, h.phase, h.skipped, h.keyset, h.provenance, h.error)
            for h in recorded.hops]

for step in torch_sim.STEPS:
    torch_sim.bring_up(step)
    devices = ["sim"] if "operators" in torch_sim.installed_steps() else ["cpu"]
    for device in devices:
        traces = []
        for native in (True, False):
            recorder = tracer.Tracer(device, native=native)
            recorder.install()
            try:
                program(device)()
            finally:
                recorder.uninstall()
            traces.append(signature(recorder.trace))
        backend = sorted({(h[1], h[2]) for h in traces[0] if h[1] == "PrivateUse1" and not h[6]})
        print(step, device, traces[0] == traces[1], len(traces[0]), backend)
"""


def test_a_backend_brought_up_step_by_step_is_traced_faithfully_after_every_step():
    """Tracing after each bring-up step in one process: the native recording agrees with the Python one each time,
    so no plan from an earlier step is reused."""
    from tests.conftest import run_python

    result = run_python(BRING_UP_AND_TRACE, timeout=600, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split(" ", 3) for line in result.stdout.strip().splitlines()]
    assert {line[0] for line in lines} >= {"operators", "autograd", "amp", "distributed"}
    assert all(line[2] == "True" and int(line[3].split(" ")[0]) > 0 for line in lines), result.stdout
    backend_hops = {line[0]: line[3] for line in lines if line[1] == "sim"}
    assert "('PrivateUse1', 'kernel')" in backend_hops["operators"]
