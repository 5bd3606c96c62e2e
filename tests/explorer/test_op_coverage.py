"""Coverage of a backend: statuses, transitive fallback, core subset, diffs and exports."""
import importlib
import json

import torch

from pu1_explorer import coverage, diff
from pu1_explorer.op_coverage import snapshot_from_json


def test_every_aten_overload_is_classified():
    snapshot = coverage("sim")
    aten = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")]
    assert len(snapshot.rows) == len(aten)
    summary = snapshot.summary()
    assert sum(entry["count"] for entry in summary["direct"].values()) == len(aten)
    assert abs(sum(entry["percent"] for entry in summary["direct"].values()) - 100) < 0.1


def test_statuses_of_known_operators():
    rows = coverage("sim").by_operator()
    assert rows["aten::mul.Tensor"].backend == "kernel"
    assert rows["aten::special_erfcx.out"].backend == "fallback"
    assert rows["aten::silu"].autograd == "kernel"  # sim's own AutogradPrivateUse1 kernel
    assert rows["aten::mm"].autocast == "kernel" and rows["aten::add.Tensor"].autocast == "fallthrough"


def test_composites_that_land_on_the_fallback_count_as_falling_back():
    row = coverage("sim").by_operator()["aten::atan2"]
    assert row.backend == "composite_explicit_nonfunctional"
    assert row.transitive == "fallback" and row.falls_back


def test_core_subset():
    snapshot = coverage("sim")
    core = [row for row in snapshot.rows if row.core]
    tagged = importlib.import_module("pu1_explorer.op_coverage").core_operators()
    assert {row.operator for row in core} == set(tagged) and len(core) > 150
    assert snapshot.summary(core_only=True)["operators"] == len(core)


def test_two_backends_differ():
    changes = diff(coverage("CPU"), coverage("sim"))
    by_operator = {change.operator: change for change in changes}
    assert by_operator["aten::special_erfcx.out"].before == "kernel"
    assert by_operator["aten::special_erfcx.out"].after == "fallback"


def test_registering_a_kernel_changes_the_snapshot():
    before = coverage("sim")
    library = torch.library.Library("aten", "IMPL")
    library.impl("special_erfcx", lambda x: torch.ones_like(x), "PrivateUse1")
    try:
        after = coverage("sim")
    finally:
        del library  # its finalizer removes the kernels
    changes = {change.operator: (change.before, change.after) for change in diff(before, after)}
    assert changes == {"aten::special_erfcx": ("fallback", "kernel")}  # was: a wrapper over the .out fallback


def test_exports_round_trip():
    snapshot = coverage("sim")
    assert snapshot_from_json(snapshot.to_json()).rows == snapshot.rows
    csv_lines = snapshot.to_csv().splitlines()
    assert csv_lines[0] == "operator,backend,autograd,autocast,core,transitive,family"
    assert len(csv_lines) == len(snapshot.rows) + 1
    markdown = snapshot.to_markdown(core_only=True)
    assert "| `aten::mul.Tensor` | kernel |" in markdown
    assert json.loads(snapshot.to_json())["summary"]["operators"] == len(snapshot.rows)


def test_filters():
    snapshot = coverage("sim")
    falling = snapshot.filter(status="fallback", core_only=True, transitive=True)
    assert falling and all(row.core and row.transitive == "fallback" for row in falling)
    assert all("conv" in row.operator for row in snapshot.filter(text="conv"))


def test_c10d_collectives_are_classified_for_the_device():
    rows = coverage("sim", namespace="c10d").by_operator()
    c10d = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("c10d::")]
    assert sorted(rows) == sorted(c10d)
    # PyTorch registers the collectives' PrivateUse1 kernels itself: they hand the call to the
    # process group's backend for the device (simccl for sim)
    assert rows["c10d::allreduce_"].backend == "kernel" and rows["c10d::broadcast_"].backend == "kernel"
    assert rows["c10d::monitored_barrier_"].backend == "fallback"  # registered for the CPU only


def test_core_operators_are_the_overloads_torch_tags_core():
    module = importlib.import_module("pu1_explorer.op_coverage")  # the module: the package's `coverage` is the function
    core = module.core_operators()
    assert "aten::add.Tensor" in core and "aten::convolution" in core and "aten::linear" not in core
    for name in ["aten::add.Tensor", "aten::convolution", "aten::linear", "aten::mm", "aten::matmul", "aten::sum.dim_IntList"]:
        base, _, overload = name[len("aten::"):].partition(".")
        tags = getattr(getattr(torch.ops.aten, base), overload or "default").tags
        assert (name in core) == (torch.Tag.core in tags), name
