"""Every probe of the scorecard on sim, which implements every step: each passes, with the finding it should report.

One quick scorecard runs for the whole module; the expected figures come from torch and the scorecard's own
lists, never from a copy of its output. The probes also run in this process, as plain functions.
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pu1_explorer.conformance import (PROBE_NAMES, QUICK_ERROR_OPS, QUICK_OPS, QUICK_SAMPLES, Scorecard,
                                      harness, probes, scorecard)

SILENT_REGISTRIES = Path(__file__).parent / "silent_trace_registries.py"
pytestmark = pytest.mark.xdist_group("sim-scorecard")  # one worker takes sim's scorecard once


@pytest.fixture(scope="module")
def sim_card() -> Scorecard:
    return scorecard("sim", jobs=2, opinfo="quick")


def test_every_probe_runs_and_passes_on_sim(sim_card):
    assert [probe.name for probe in sim_card.probes] == list(PROBE_NAMES)
    failed = {probe.name: (probe.status, probe.detail) for probe in sim_card.probes if probe.status != "passed"}
    assert not failed
    assert sim_card.summary()["passed"] == len(PROBE_NAMES) and sim_card.opinfo == "quick"


def test_the_device_probes_count_the_devices_torch_sees(sim_card):
    count = torch.accelerator.device_count()
    assert count >= 2  # sim has two, so that the guard probe does not skip
    assert sim_card.probe("device module").detail.startswith(f"{count} device(s): ")
    assert sim_card.probe("torch.accelerator").detail == (f"current_accelerator() is sim, {count} device(s), "
                                                          "synchronize works")
    assert "copies across devices, mixing refused" in sim_card.probe("devices and guard").detail


def test_the_allocator_probe_sees_the_megabyte_it_allocated(sim_card):
    found = re.match(r"memory_allocated \+(\d+) bytes for 1 MiB, peak (\d+) bytes above the start",
                     sim_card.probe("allocator statistics").detail)
    assert found and int(found[1]) >= 1 << 20 and int(found[2]) >= 3 << 20


def test_the_runtime_probes_report_what_they_checked(sim_card):
    assert "record, wait, synchronize, query" in sim_card.probe("streams and events").detail
    assert "torch.sim.get_rng_state/set_rng_state reproduce draws" in sim_card.probe("generator").detail
    assert sim_card.probe("pinned memory").detail.endswith("non-blocking copies both ways")
    assert "map_location='cpu'; state_dict" in sim_card.probe("serialization").detail
    assert "match the CPU" in sim_card.probe("operators").detail


def test_the_stream_ordering_probe_hears_sims_trace_hooks_and_the_sanitizer_finds_its_race(sim_card):
    detail = sim_card.probe("stream-ordering traces").detail
    assert detail.startswith("an unordered read on another stream is reported, the same read after wait_stream is "
                             "clean; hooks heard: ")
    heard = detail.split("hooks heard: ")[1].split(", ")
    assert {"event_record", "event_wait", "memory_allocation", "device_synchronization"} <= set(heard)


@pytest.mark.parametrize("environment, imports, failure", [
    ({"SIM_BRINGUP_STEP": "operators"}, [],
     "sim does not tell PyTorch about its streams and events: torch.sim._gpu_trace is missing"),
    ({}, [str(SILENT_REGISTRIES)], "sim has device-trace registries but fired no event-record hook"),
])
def test_the_stream_ordering_probe_fails_on_a_backend_whose_trace_hooks_are_missing_or_silent(environment, imports,
                                                                                             failure):
    card = scorecard("sim", imports=["torch_sim", *imports], env=environment, probes=["stream-ordering traces"],
                     opinfo="none")
    result = card.probe("stream-ordering traces")
    assert result.status == "failed" and failure in result.detail, (result.status, result.detail)
    assert "torch.<device>._gpu_trace" in result.hint


def test_the_autograd_probe_compares_every_gradient(sim_card):
    layers = [torch.nn.Linear(16, 8), torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.LayerNorm(16),
              torch.nn.Embedding(10, 6)]
    inputs_with_gradients = 3  # every layer's input but the embedding's indices
    gradients = sum(len(list(layer.parameters())) for layer in layers) + inputs_with_gradients
    result = sim_card.probe("autograd on layers")
    assert result.counts == {"gradients": gradients} and f"{gradients} gradients match" in result.detail
    assert "causal or not" in sim_card.probe("attention").detail
    assert sim_card.probe("RNNs").detail.startswith("nn.LSTM and nn.GRU")


def test_the_autocast_probe_names_the_dtypes_sim_supports(sim_card):
    detail = sim_card.probe("autocast (AMP)").detail
    assert str([str(dtype) for dtype in torch.sim.get_amp_supported_dtype()]) in detail
    assert f"(default {torch.get_autocast_dtype('sim')})" in detail


def test_the_autoload_probe_names_the_entry_points(sim_card):
    entry_points = ", ".join(ep.value for ep in importlib.metadata.entry_points(group="torch.backends"))
    assert sim_card.probe("autoload").detail == (f"`import torch` registers 'sim' "
                                                 f"(entry points in torch.backends: {entry_points})")


def test_the_profiler_compile_and_distributed_probes(sim_card):
    profiled = sim_card.probe("profiler")
    assert profiled.counts["device_events"] > 0 and "sim::" in profiled.detail
    assert "eager's result" in sim_card.probe("torch.compile").detail
    backend = dist.Backend.default_device_backend_map["sim"]
    assert f"({backend} for sim) all_reduces and all_gathers" in sim_card.probe("distributed").detail


def test_the_quick_sweeps_cover_their_lists(sim_card):
    differential = sim_card.probe("opinfo differential")
    assert [op.name for op in differential.ops] == list(QUICK_OPS)
    assert differential.counts["ops"] == len(QUICK_OPS) == differential.counts["passed"]
    samples = sum(op.counts["passed"] for op in differential.ops)
    assert all(0 < op.counts["passed"] <= QUICK_SAMPLES for op in differential.ops)
    assert differential.detail == f"{len(QUICK_OPS)} of {len(QUICK_OPS)} ops match the CPU ({samples} samples)"
    bad_inputs = sim_card.probe("opinfo bad inputs")
    assert [op.name for op in bad_inputs.ops] == list(QUICK_ERROR_OPS)
    passed, skipped = bad_inputs.counts["passed"], bad_inputs.counts["skipped"]
    assert passed + skipped == len(QUICK_ERROR_OPS) and passed > skipped
    assert bad_inputs.detail.startswith(f"{passed} of {passed} ops raise like the CPU")


def test_the_probes_run_in_this_process_as_plain_functions():
    count = torch.accelerator.device_count()
    harness.take_report()
    probes.device_module("sim")
    assert harness.take_report() == (f"{count} device(s): is_available, device_count, current_device and "
                                     "set_device agree", {})
    probes.operators("sim")
    assert "match the CPU" in harness.take_report()[0]
    with pytest.raises(AssertionError, match="does not register 'nosuch' .*needs `import torch_nosuch`"):
        probes.autoload("nosuch", ["torch_nosuch"])
    with pytest.raises(AssertionError, match="torch.nosuch is not registered"):
        probes.device_module("nosuch")
    assert harness.take_report() is None  # a failing probe reported nothing
