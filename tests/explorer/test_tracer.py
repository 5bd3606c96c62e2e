"""The tracer: hops in order, nesting, skipped fallthroughs, faithfulness and table restoration."""
import json
from pathlib import Path

import jsonschema
import pytest
import torch

import pu1_explorer
from torch_sim import workloads
from pu1_explorer import trace


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
