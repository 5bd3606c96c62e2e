"""The tracer: hops in order, nesting, skipped fallthroughs, faithfulness and table restoration."""
import json
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest
import torch

import pu1_explorer
from pu1_explorer import trace, workloads
from pu1_explorer import tracer as tracer_module
from pu1_explorer.boxed import native_helper
from pu1_explorer.dispatch_tables import FALLTHROUGH, MISSING, entry_from_dump
from pu1_explorer.tracer import trace_from_json
from tests.backend.device_sleeps import LONG_MS
from tests.explorer.trace_checks import all_tables, disagreements


def hops_of(recorded, operator):
    return [hop for hop in recorded.hops if hop.operator == operator]


def test_forward_and_backward_hops_in_order():
    x = torch.randn(4, 8, device="sim", requires_grad=True)
    with trace("sim") as recorded:
        (x * 2).sum().backward()
    mul = hops_of(recorded, "aten::mul.Tensor")
    # sim's multiply is a direct kernel: PyTorch's structured kernel runs on the sim tensors, with no CPU hop
    keys = [hop.key for hop in mul if not hop.skipped]
    assert keys[:2] == ["AutogradPrivateUse1", "PrivateUse1"] and "CPU" not in keys
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


def traced_product_behind_a_sleep(wake_after: float, then: Callable[[], object]) -> tuple[Any, object]:
    """Trace a matrix product queued behind a device sleep that ends `wake_after` seconds later, and `then()` called
    right after it in the same block; returns the trace and what `then()` returned."""
    a = torch.randn(8, 8, device="sim")
    b = torch.randn(8, 8, device="sim")
    torch.mm(a, b)  # the first launch of a dtype combination runs before its call returns
    torch.sim.synchronize()
    sleep = torch.sim.device_sleep(LONG_MS)
    waker = threading.Timer(wake_after, sleep.wake)
    with trace("sim") as recorded:
        waker.start()
        torch.mm(a, b)
        result = then()
    waker.join()
    return recorded, result


def test_calls_of_a_queued_kernel_nest_under_the_hop_that_launched_it_however_late_they_run():
    """sim's matrix product returns before its kernel ran. The kernel runs the CPU's impl() on the driver's executor,
    which calls operators of its own there: here while the host is already inside the next operator, the copy back,
    waiting for the device. Those calls are the product's, and the tree shows them under it."""
    x = torch.ones(4, device="sim")
    recorded, _ = traced_product_behind_a_sleep(1.0, x.cpu)
    product = next(hop for hop in hops_of(recorded, "aten::mm") if hop.key == "PrivateUse1" and not hop.skipped)
    copy_back = next(hop for hop in recorded.hops if hop.depth == 0 and hop.operator != "aten::mm")
    launched = recorded.children(product.index)
    assert launched, "the product's kernel called no operator on the device"
    for hop in launched:
        assert hop.start_ns > product.start_ns + product.duration_ns, f"{hop.operator} ran before the product returned"
        assert copy_back.start_ns < hop.start_ns < copy_back.start_ns + copy_back.duration_ns, \
            f"{hop.operator} ran outside the copy back's wait: the test did not make the race it is about"
        assert hop.depth == product.depth + 1
    lines = recorded.to_text(show_skipped=False).splitlines()
    indent = {line: len(line) - len(line.lstrip()) for line in lines}
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("aten::mm @ PrivateUse1"))
    below = []
    for line in lines[first + 1:]:
        if indent[line] <= indent[lines[first]]:
            break
        if indent[line] == indent[lines[first]] + 2:
            below.append(line.split(" @ ")[0].strip())
    assert below == [hop.operator for hop in launched if not hop.skipped], \
        "the tree does not list the kernel's calls under the product"


def test_a_trace_ends_once_the_device_ran_what_its_block_launched():
    """The block queues a product behind a device sleep and leaves before the device ran it; the product's kernel
    calls its operators after that, and the trace still holds them."""
    recorded, left_the_block_while_the_device_slept = traced_product_behind_a_sleep(
        0.5, lambda: not torch.sim.current_stream().query())
    assert left_the_block_while_the_device_slept, "the device ran the product before the block ended"
    product = next(hop for hop in hops_of(recorded, "aten::mm") if hop.key == "PrivateUse1" and not hop.skipped)
    assert recorded.children(product.index), "the trace ended before the product's kernel called its operators"


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


def test_an_lstm_trained_inside_a_trace_of_sim_keeps_its_autograd_and_its_bits():
    """Wrapping the CPU key of a CompositeImplicitAutograd operator such as aten::lstm (which sim's recurrent
    kernels call on the host) must not change the kernel the dispatcher computes for AutogradCPU: autograd would
    warn that no autograd kernel is registered and the backward would not be the CPU's."""
    def run():
        torch.manual_seed(0)
        model = torch.nn.LSTM(4, 8, num_layers=2).to("sim")
        output, _ = model(torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(1)).to("sim"))
        output.square().mean().backward()
        return output.detach().cpu(), [p.grad.cpu() for p in model.parameters()]

    plain_output, plain_grads = run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with trace("sim") as recorded:
            traced_output, traced_grads = run()
    assert recorded.error is None
    assert any(hop.operator == "aten::lstm.input" and hop.key == "AutogradPrivateUse1" for hop in recorded.hops)
    assert torch.equal(plain_output, traced_output)
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


def test_json_export_reads_back_into_the_same_trace():
    with trace("sim") as recorded:
        torch.ones(3, device="sim").relu()
    again = trace_from_json(recorded.to_json())
    assert again.hops == recorded.hops and again.hops[-1].inputs
    assert (again.device, again.error) == (recorded.device, recorded.error)


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


# ----------------------------------------------------------------- the recording against the tables
def recorded_run(device, program, raises=None):
    """The trace of `program` (which builds its own inputs); `raises` is the (type, message pattern) of the
    error the program must end with, or None when it must not fail."""
    if raises is None:
        with trace(device) as recorded:
            program()
        return recorded
    with pytest.raises(raises[0], match=raises[1]):
        with trace(device) as recorded:
            program()
    return recorded


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


SAME_DEVICE = (RuntimeError, "Expected all tensors to be on the same device")
PROGRAMS = {  # name: (device, program, the error it ends with)
    "backward": ("sim", backward_of_a_product, None),
    "mlp-sim": ("sim", mlp_forward_backward("sim"), None),
    "mlp-cpu": ("cpu", mlp_forward_backward("cpu"), None),
    "wrapped-numbers": ("sim", wrapped_numbers, None),
    "views-inplace-autocast": ("sim", views_inplace_and_autocast, None),
    "error": ("sim", a_kernel_that_fails, SAME_DEVICE),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_hop_agrees_with_the_dispatch_tables(name):
    """Kind and provenance of every executed hop, the fallthroughs skipped before it, nesting and key order,
    against the tables computed before the run; a failing program records its error on the hops it unwound."""
    device, program, raises = PROGRAMS[name]
    tables = all_tables()
    recorded = recorded_run(device, program, raises)
    assert len(recorded.hops) > 5
    assert disagreements(recorded, tables, "cpu" if device == "cpu" else "privateuse1") == []
    assert any(hop.skipped for hop in recorded.hops)
    assert any(hop.phase == "backward" for hop in recorded.hops) == name.startswith(("backward", "mlp", "wrapped"))
    failed = [hop for hop in recorded.hops if hop.error]
    if raises is None:
        assert failed == [] and recorded.error is None
    else:
        assert failed and all(hop.error.startswith(f"{raises[0].__name__}: {raises[1]}") for hop in failed)
        assert recorded.error.startswith(f"{raises[0].__name__}: {raises[1]}")


def test_a_call_starts_with_its_tensors_keys_and_the_threads_included_keys():
    x = torch.randn(3, device="sim", requires_grad=True)

    def names(keyset):
        text = str(keyset)
        return {part.strip() for part in text[text.find("(") + 1: text.rfind(")")].split(",") if part.strip()}

    expected = ((names(torch._C._dispatch_keys(x)) | names(torch._C._dispatch_tls_local_include_set()))
                - names(torch._C._dispatch_tls_local_exclude_set()))
    with trace("sim") as recorded:
        x.neg()
    first = recorded.hops[0]
    assert first.operator == "aten::neg" and first.parent is None
    assert set(first.keyset) == expected and "AutogradPrivateUse1" in expected


def test_wrapped_number_scalars_reach_the_kernels_as_tensors():
    x = torch.tensor([1.0, -2.0, 3.0], device="sim")
    with trace("sim") as recorded:
        signs = torch.copysign(x, -1.0)
        remainders = torch.fmod(x, 0.7)
        doubled = x * 2.0
    assert signs.tolist() == [-1.0, -2.0, -3.0] and doubled.tolist() == [2.0, -4.0, 6.0]
    assert torch.equal(remainders.cpu(), torch.fmod(x.cpu(), 0.7))
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
        recorded = recorded_run("sim", lambda: torch.special.erfcx(torch.ones(2, device="sim")),
                                (ValueError, "erfcx is not for today"))
    finally:
        del library  # its finalizer removes the kernels
    errors = [hop.error for hop in recorded.hops if hop.error]
    assert errors and all(error == "ValueError: erfcx is not for today" for error in errors)
    assert [hop.key for hop in recorded.hops if hop.error] == ["AutogradPrivateUse1", "PrivateUse1"]


def test_nested_traces_are_refused_clearly():
    before = all_tables()
    with trace("sim") as outer:
        with pytest.raises(RuntimeError, match="a trace is already active"):
            with trace("sim"):
                pass
        with pytest.raises(RuntimeError, match="already active"):
            tracer_module.Tracer("cpu").install()
        torch.ones(2, device="sim").neg()
    assert all_tables() == before
    assert "aten::neg" in outer.operators()
    with trace("sim"):  # and the next trace may start
        pass


def test_a_missing_compiled_helper_is_a_clear_error_and_leaves_no_trace_active(monkeypatch):
    with monkeypatch.context() as patched:
        patched.delattr(pu1_explorer, "_native")
        patched.setitem(sys.modules, "pu1_explorer._native", None)
        with pytest.raises(ImportError, match=r"pu1_explorer\._native is missing or broken .* rebuild it"):
            with trace("sim"):
                pass
    with trace("sim") as recorded:
        torch.ones(2, device="sim").neg()
    assert "aten::neg" in recorded.operators()


def test_each_recording_restores_the_tables_exactly():
    before = all_tables()
    recorded_run("sim", backward_of_a_product)
    recorded_run("cpu", mlp_forward_backward("cpu"))
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


def test_the_wrapped_kernels_are_those_of_the_dispatch_table_dumps():
    """Every wrapped (operator, key) and its kind and provenance, as the dumps give them, for sim's keys (the
    provenance read back from each wrapped kernel itself); and the fallthrough test the hops use agrees with
    the dumps."""
    keys = tracer_module.TRACE_KEYS["privateuse1"]
    plan = tracer_module.WrapPlan(tracer_module.TRACED_NAMESPACES, keys)
    recorder = native_helper().HopRecorder(plan=plan.sites)
    collector = tracer_module._NativeHops(recorder, plan, tracer_module.Trace(), {})
    sites = recorder.sites()
    wrapped = {site[:2]: collector._site_entry(index) for index, site in enumerate(sites)
               if site[2] != tracer_module.PASSTHROUGH_TAG}
    passthroughs = {site[:2] for site in sites if site[2] == tracer_module.PASSTHROUGH_TAG}
    expected, expected_passthroughs = {}, set()
    for operator in torch._C._dispatch_get_all_op_names():
        if operator.split("::")[0] not in tracer_module.TRACED_NAMESPACES:
            continue
        dump = torch._C._dispatch_dump_table(operator)
        for key in keys:
            entry = entry_from_dump(operator, dump, key)
            if entry.kind not in (FALLTHROUGH, MISSING):
                expected[operator, key] = (entry.kind, entry.provenance)
        if any(line.startswith("CPU: ") and line.endswith("[math kernel]") for line in dump.splitlines()):
            expected_passthroughs.add((operator, "AutogradCPU"))
        for key in ("ADInplaceOrView", "BackendSelect", "AutocastCPU", "Python", "Functionalize"):
            assert plan.is_fallthrough(operator, key) == (
                entry_from_dump(operator, dump, key).kind == FALLTHROUGH), (operator, key)
    assert wrapped == expected
    assert passthroughs == expected_passthroughs and ("aten::lstm.input", "AutogradCPU") in passthroughs
    assert recorder.operator_count() == len({operator for operator, _ in expected})
    with trace("sim") as recorded:
        pass
    assert recorded.wrapped_operators == recorder.operator_count()


def test_a_kernel_registered_between_traces_is_seen_by_the_next_trace():
    """No stale plan: what a bring-up step registers shows in the very next trace, and leaves with it."""
    def erfcx():
        torch.special.erfcx(torch.rand(3, device="sim"))

    def reached(recorded):
        return {(hop.operator, hop.kind) for hop in recorded.hops if hop.key == "PrivateUse1" and not hop.skipped}

    assert ("aten::special_erfcx.out", "fallback") in reached(recorded_run("sim", erfcx))
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("special_erfcx", lambda x: torch.zeros_like(x), "PrivateUse1")
        step = recorded_run("sim", erfcx)
        assert ("aten::special_erfcx", "kernel") in reached(step)
        kernel = next(hop for hop in step.hops if hop.operator == "aten::special_erfcx" and hop.key == "PrivateUse1")
        assert kernel.provenance.startswith("tests/explorer/test_tracer.py:")
    finally:
        del library  # its finalizer removes the kernels
    assert ("aten::special_erfcx.out", "fallback") in reached(recorded_run("sim", erfcx))


def test_a_backend_brought_up_step_by_step_is_traced_faithfully_after_every_step():
    """Tracing after each bring-up step in one process: every hop agrees with the tables of that moment, so no
    plan from an earlier step is reused."""
    from tests.conftest import run_forked

    root = Path(__file__).resolve().parents[2]
    result = run_forked(["-c", "from tests.explorer.trace_checks import main; main()"], timeout=600, cwd=root,
                        TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert {line["step"] for line in lines} >= {"operators", "autograd", "amp", "distributed"}
    assert all(line["hops"] > 0 and line["disagreements"] == [] for line in lines), result.stdout[-3000:]
    backend = {line["step"]: line["backend"] for line in lines if line["device"] == "sim"}
    assert ["PrivateUse1", "kernel"] in backend["operators"]
