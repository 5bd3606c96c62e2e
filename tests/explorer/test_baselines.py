"""Coverage against PyTorch's own devices' kernels (`coverage --against cuda`): the baseline read from torch's
native_functions.yaml, checked against a second reading of the file and against the CPU's live registrations."""
from __future__ import annotations

import functools
import json
import re
from collections import Counter

import pytest
import yaml

from pu1_explorer import coverage
from pu1_explorer.baselines import (
    AGAINST_STATUSES, FALLS_BACK, OWN_KERNEL, THROUGH_COMPOSITE, UnknownBaselineError, against, baseline,
    native_functions_yaml, peers,
)
from tests.conftest import run_explorer


def kernels_by_plain_reading(key: str) -> set[str]:
    """The overloads whose dispatch entry names `key` (or that give a ufunc inner loop, from which torchgen writes
    the CPU's and CUDA's kernels), plus those whose structured delegate is one of them, read with PyYAML alone: a
    second reading of the file, independent of torchgen's model."""
    entries = yaml.load(native_functions_yaml().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    listed, delegates = set(), {}
    for entry in entries:
        name = entry["func"].split("(", 1)[0]
        if any(key in [part.strip() for part in keys.split(",")] for keys in entry.get("dispatch", {})) or (
                "ufunc_inner_loop" in entry and key in ("CPU", "CUDA")):
            listed.add(name)
        if "structured_delegate" in entry:
            delegates[name] = entry["structured_delegate"]
    return {f"aten::{name}" for name in listed | {name for name, target in delegates.items() if target in listed}}


@pytest.fixture(scope="module")
def sim_snapshot():
    return coverage("PrivateUse1", label="sim")


@pytest.mark.parametrize(("device", "key"), [("cuda", "CUDA"), ("cpu", "CPU"), ("mps", "MPS")])
def test_the_baseline_is_what_a_plain_reading_of_the_yaml_finds(device, key):
    reference = baseline(device)
    assert reference.operators == kernels_by_plain_reading(key)
    assert len(reference) == reference.listed + reference.delegated and reference.delegated > 0


def test_overloads_whose_dispatch_entries_differ_are_counted_as_each_device_registers_them():
    cuda, cpu = baseline("cuda").operators, baseline("cpu").operators
    assert {"aten::add.out", "aten::add.Tensor", "aten::add_.Tensor"} <= cuda  # the last two through the delegate
    assert "aten::cudnn_convolution" in cuda and "aten::cudnn_convolution" not in cpu  # a cuDNN-only kernel
    assert "aten::_foreach_add.Scalar" in cuda and "aten::_foreach_add.Scalar" not in cpu  # the CPU's is composite
    assert "aten::linear" not in cuda | cpu  # CompositeImplicitAutograd: no device kernel
    assert "aten::new_zeros" not in cuda | cpu  # CompositeExplicitAutograd: one kernel for every device


def test_the_cpu_baseline_is_exactly_the_cpu_kernels_the_dispatcher_has():
    report = against(coverage("CPU"), "cpu")
    assert len(report.rows) == len(baseline("cpu")) and {row.status for row in report.rows} == {OWN_KERNEL}


def test_sim_against_cuda_sorts_every_cuda_kernel_by_what_sim_does_with_it(sim_snapshot):
    report = against(sim_snapshot, "cuda")
    assert [row.operator for row in report.rows] == sorted(baseline("cuda").operators)
    statuses = {row.operator: row.status for row in report.rows}
    assert statuses["aten::mul.Tensor"] == OWN_KERNEL
    assert statuses["aten::special_erfcx.out"] == FALLS_BACK
    assert statuses["aten::atan2"] == FALLS_BACK  # a composite that lands on the fallback
    assert statuses["aten::_foreach_add.Scalar"] == THROUGH_COMPOSITE
    totals = report.totals()
    counts = Counter(statuses.values())
    assert totals["overloads"] == len(baseline("cuda")) == sum(counts.values())
    assert {status: totals["by_status"][status]["count"] for status in AGAINST_STATUSES} == \
        {status: counts[status] for status in AGAINST_STATUSES}
    match = re.fullmatch(r"sim has its own kernel for (\d+) of CUDA's (\d+) kernels \(([\d.]+)%\); (\d+) .*",
                         report.headline())
    assert match and int(match[1]) == counts[OWN_KERNEL] and int(match[2]) == len(baseline("cuda"))
    assert float(match[3]) == round(100 * counts[OWN_KERNEL] / len(baseline("cuda")), 1)
    assert sum(family.total for family in report.by_family()) == len(report.rows)
    core = report.totals(core_only=True)
    assert 0 < core["overloads"] < totals["overloads"]


def test_peers_count_each_devices_share_of_cudas_kernels():
    shares = peers("cuda")
    assert shares == {"cpu": len(baseline("cpu").operators & baseline("cuda").operators),
                      "mps": len(baseline("mps").operators & baseline("cuda").operators)}
    assert 0.6 < shares["mps"] / len(baseline("cuda")) < 0.75  # MPS has about two thirds of CUDA's kernels


def test_an_unknown_baseline_is_refused_in_one_line(sim_snapshot):
    with pytest.raises(UnknownBaselineError, match=r"^no baseline for 'vulkan': measure against one of cuda, cpu, mps$"):
        against(sim_snapshot, "vulkan")


def test_the_command_writes_every_format_and_refuses_a_namespace_it_cannot_compare(tmp_path):
    explorer = functools.partial(run_explorer, "coverage")

    markdown = explorer("--device", "sim", "--against", "cuda")
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("# sim against cuda") and f"of CUDA's {len(baseline('cuda'))} kernels" in markdown.stdout
    output = tmp_path / "against.json"
    assert explorer("--against", "mps", "--format", "json", "-o", str(output)).returncode == 0
    data = json.loads(output.read_text())
    assert data["baseline"]["device"] == "mps" and len(data["rows"]) == len(baseline("mps"))
    csv_lines = explorer("--against", "cuda", "--core", "--format", "csv").stdout.splitlines()
    assert csv_lines[0] == "operator,family,core,status" and all(line.split(",")[2] == "True" for line in csv_lines[1:])
    refused = explorer("--against", "cuda", "--namespace", "c10d")
    assert refused.returncode == 1
    assert [line for line in refused.stderr.splitlines() if line.startswith("pu1-explorer: error:")] == [
        "pu1-explorer: error: ValueError: --against compares ATen kernels; it does not take --namespace c10d"]
