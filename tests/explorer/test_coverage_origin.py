"""A coverage snapshot knows where it was measured, and drills down only into the tables measured there.

A snapshot of toy (a second backend, classified by the command line in a fresh process) read back in this
process, where sim owns PrivateUse1, must never show sim's dispatch table under toy's name.
"""
from __future__ import annotations

import json

import pytest
import torch

from pu1_explorer import coverage
from pu1_explorer.dispatch_tables import backend_tables
from pu1_explorer.op_coverage import ForeignSnapshotError, observe, snapshot_from_json, this_process
from pu1_explorer.widgets import CoverageExplorer
from tests.conftest import run_explorer


def hover_texts(figure) -> str:
    """Every hover text of a dispatch-table figure, as one string."""
    return " ".join(text for row in figure.data[0].hovertext for text in row)


def test_a_snapshot_carries_the_tables_it_was_classified_from():
    snapshot = coverage("sim")
    assert snapshot.privateuse1 == "sim" and snapshot.process == this_process()
    for operator in ("aten::mul.Tensor", "aten::special_erfcx.out", "aten::atan2", "aten::silu"):
        assert snapshot.operator_tables(operator) == backend_tables(operator, ("CPU", "PrivateUse1"))
    cpu = coverage("CPU")
    assert cpu.operator_tables("aten::mul.Tensor") == backend_tables("aten::mul.Tensor", ("CPU",))
    read_back = snapshot_from_json(snapshot.to_json())
    assert (read_back.privateuse1, read_back.process) == ("sim", snapshot.process)
    assert read_back.operator_tables("aten::mul.Tensor") == snapshot.operator_tables("aten::mul.Tensor")
    assert observe(snapshot, type("Report", (), {"copying_kernels": ()})()).tables is snapshot.tables


def test_the_tables_are_those_of_the_moment_of_classification():
    """A kernel registered after the snapshot shows in a new snapshot's table, not in the old one's."""
    before = coverage("sim")
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("special_erfcx", lambda x: torch.ones_like(x), "PrivateUse1")
        after = coverage("sim")
    finally:
        del library  # its finalizer removes the kernel
    backend_of = lambda snapshot: snapshot.operator_tables("aten::special_erfcx")["PrivateUse1"][-1]  # noqa: E731
    assert backend_of(before).key == "Backend" and backend_of(before).kind != "kernel"
    assert backend_of(after).kind == "kernel" and backend_of(after).is_python
    assert backend_of(coverage("sim")) == backend_of(before)


def test_a_snapshot_without_tables_says_where_to_measure_them_and_draws_nothing():
    """A snapshot read from JSON that lacks its tables never falls back on this process's dispatcher."""
    data = json.loads(coverage("sim", label="mydev").to_json())
    data.update(tables=None, privateuse1="mydev", process="1-elsewhere")
    snapshot = snapshot_from_json(json.dumps(data))
    with pytest.raises(ForeignSnapshotError) as error:
        snapshot.operator_tables("aten::mul.Tensor")
    message = str(error.value)
    assert "\n" not in message and "python -m pu1_explorer coverage --device mydev --format json" in message
    widget = CoverageExplorer(snapshot=snapshot)
    widget.drill.value = "aten::mul.Tensor"
    assert widget.drilled is None and widget.drill_output.outputs == ()
    assert "--device mydev" in widget.drill_message.value


def test_a_snapshot_of_toy_drills_into_toys_tables_not_sims(fixture_backend_env, tmp_path):
    """toy's snapshot, measured by the command line in toy's own process, shows toy's kernels in this sim process."""
    result = run_explorer("coverage", "--device", "toy", "--import", "torch_toy", "--format", "json", timeout=600,
                          cwd=tmp_path, **{"SIM_FALLBACK": "silent", **fixture_backend_env})
    assert result.returncode == 0, result.stderr
    snapshot = snapshot_from_json(result.stdout)
    assert (snapshot.label, snapshot.privateuse1) == ("toy", "toy") and snapshot.process != this_process()
    assert torch.device("privateuseone").type == "sim"
    widget = CoverageExplorer(snapshot=snapshot)
    for operator in ("aten::mul.Tensor", "aten::flip"):
        widget.drill.value = operator
        assert widget.drilled is not None and list(widget.drilled.data[0].x) == ["CPU", "PrivateUse1"]
        hovers = hover_texts(widget.drilled)
        assert "toy.cpp" in hovers and "backend/torch_sim/csrc" not in hovers  # toy's registrations, none of sim's
    backend = {entry.key: entry for entry in snapshot.operator_tables("aten::flip")["PrivateUse1"]}["Backend"]
    assert backend.kind == "fallback" and "toy.cpp" in backend.provenance
    sims = {entry.key: entry for entry in backend_tables("aten::flip", ("PrivateUse1",))["PrivateUse1"]}["Backend"]
    assert sims.provenance != backend.provenance
