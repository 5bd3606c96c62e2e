"""Demand and `next-kernels`: which overloads real models reach, counted below the composites, and a backend's
missing kernels ranked by them. The shipped counts are checked against a new measurement in this process; the
ranking is checked on sim here and on toy in a fresh process (the generated backend's is in test_new_backend.py)."""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from pu1_explorer import coverage
from pu1_explorer.demand import (
    TODAY, Demand, DemandDataError, Run, WorkloadError, counting, demand_from_json, measure_script, measure_zoo,
    next_kernels, shipped,
)
from pu1_explorer.zoo import AUTOCAST_TRAIN, INFERENCE, TRAIN, ZOO
from tests.conftest import run_explorer
from tests.explorer.test_fixture_backend import run_cli, run_toy


@pytest.fixture
def counted_library():
    """Two operators of a test namespace: one whose CPU kernel calls aten::sin inside itself, one composite that
    decomposes into aten::cos."""
    library = torch.library.Library("demand_test", "DEF")
    library.define("inside_kernel(Tensor x) -> Tensor")
    library.impl("inside_kernel", lambda x: torch.sin(x), "CPU")
    library.define("decomposes(Tensor x) -> Tensor")
    library.impl("decomposes", lambda x: torch.cos(x), "CompositeImplicitAutograd")
    yield torch.ops.demand_test
    del library


def test_a_composites_decomposition_counts_and_what_a_kernel_calls_inside_itself_does_not(counted_library):
    with counting("cpu") as counts:
        x = torch.ones(4, 3)
        counted_library.inside_kernel(x)
        counted_library.decomposes(x)
        torch.nn.functional.linear(x, torch.ones(2, 3), torch.ones(2))
    assert counts["demand_test::inside_kernel"] == 1 and "aten::sin" not in counts
    assert counts["demand_test::decomposes"] == 1 and counts["aten::cos"] == 1
    assert (counts["aten::linear"], counts["aten::t"], counts["aten::addmm"]) == (1, 1, 1)


def test_the_backward_pass_on_autograds_device_thread_is_counted():
    x = torch.ones(3, device="sim", requires_grad=True)
    with counting("sim") as forward_only:
        (x * 2).sum()
    with counting("sim") as counts:
        (x * 2).sum().backward()
        torch.accelerator.synchronize()
    assert "aten::expand" not in forward_only and counts["aten::expand"] >= 1  # sum's backward
    assert counts["aten::mul.Tensor"] > forward_only["aten::mul.Tensor"]  # mul's backward multiplies again


def test_nothing_is_counted_after_the_block():
    with counting("cpu") as counts:
        torch.ones(2).neg()
    torch.ones(2).exp()
    assert "aten::neg" in counts and "aten::exp" not in counts


def test_the_shipped_demand_was_measured_on_this_torch_on_every_model_of_the_zoo():
    demand = shipped()
    assert demand.torch_version == torch.__version__ and demand.device == "sim"
    import transformers
    assert demand.transformers_version == transformers.__version__
    assert demand.command.startswith("pu1-explorer demand")
    assert {(run.model, run.mode) for run in demand.runs} == {(model.name, mode) for model in ZOO
                                                              for mode in model.modes}
    hugging_face = {model.family for model in ZOO if model.source.startswith("transformers.")}
    assert len(hugging_face) >= 8 and {"GPT-2", "BERT", "T5", "ViT", "Llama", "Whisper"} <= hugging_face
    assert {TRAIN, INFERENCE, AUTOCAST_TRAIN} == {run.mode for run in demand.runs}
    assert all(run.counts and all(count > 0 for count in run.counts.values()) for run in demand.runs)


@pytest.mark.parametrize("name", ["gpt2", "lstm"])
def test_measuring_again_gives_the_shipped_counts(name):
    """The data is a measurement: the same models on the same torch reach the same overloads as often."""
    runs = {(run.model, run.mode): run.counts for run in measure_zoo("sim", [name])}
    shipped_runs = {(run.model, run.mode): run.counts for run in shipped().runs if run.model == name}
    assert runs == shipped_runs, "the zoo's demand changed: refresh it with `make demand`"


def test_training_reaches_backward_and_optimizer_kernels_that_inference_does_not():
    runs = {(run.model, run.mode): run.counts for run in shipped().runs}
    train, inference = runs[("gpt2", TRAIN)], runs[("gpt2", INFERENCE)]
    assert "aten::embedding_dense_backward" in train and "aten::embedding_dense_backward" not in inference
    assert any(operator.startswith("aten::_foreach_") for operator in train)  # AdamW's default, foreach
    assert not any(operator.startswith("aten::_foreach_") for operator in inference)
    assert any("autocast" not in operator for operator in runs[("gpt2", AUTOCAST_TRAIN)])


def test_on_sim_few_kernels_the_zoo_needs_are_missing_each_a_fallback_and_the_headline_says_how_many():
    snapshot = coverage("PrivateUse1", label="sim")
    ranked = next_kernels(snapshot, shipped())
    status = {row.operator: row.transitive for row in snapshot.rows}
    assert ranked.missing == len(ranked.needs) <= 20 and ranked.reached > 150
    assert {status[need.operator] for need in ranked.needs} <= {"fallback"}
    assert f"sim lacks {ranked.missing} kernels that the 15 models need (they reach {ranked.reached} overloads)" in \
        ranked.headline()
    assert "aten::mm" not in {need.operator for need in ranked.needs}


def test_a_composite_is_not_listed_beside_the_out_kernel_it_lacks():
    snapshot = coverage("PrivateUse1", label="sim")
    runs = [Run("a", "", "", {}, "", "train", {"aten::sin": 1, "aten::sin.out": 1, "aten::empty.memory_format": 1})]
    needs = next_kernels(snapshot, Demand(runs, "sim", "")).needs
    assert [(need.operator, need.calls) for need in needs] == [("aten::sin.out", 1)]  # one call of the one kernel


def test_the_ranking_puts_what_more_models_need_first_and_follows_a_users_workload():
    snapshot = coverage("PrivateUse1", label="sim")
    status = {row.operator: row.transitive for row in snapshot.rows}
    present = sorted(operator for operator, value in status.items() if value not in TODAY)[:3]
    missing = sorted(operator for operator, value in status.items() if value in TODAY)
    assert missing, "sim has no missing overload to rank"
    runs = [Run("a", "", "", {}, "", "train", {missing[0]: 1, present[0]: 9}),
            Run("b", "", "", {}, "", "train", {missing[0]: 1}),
            Run("c", "", "", {}, "", "train", {missing[-1]: 50})]
    ranked = next_kernels(snapshot, Demand(runs, "sim", torch.__version__))
    assert [need.operator for need in ranked.needs] == [missing[0], missing[-1]]
    assert ranked.needs[0].models == ("a", "b") and ranked.needs[0].calls == 2
    assert ranked.needs[0].today == TODAY[status[missing[0]]]
    more = Demand(runs, "sim", torch.__version__).with_runs(
        [Run("d", "", "", {}, "", "script", {missing[-1]: 1}), Run("e", "", "", {}, "", "script", {missing[-1]: 1})])
    assert [need.operator for need in next_kernels(snapshot, more).needs][0] == missing[-1]


def test_a_users_workload_script_is_measured_on_the_device(tmp_path):
    script = tmp_path / "my_model.py"
    script.write_text("import torch\nx = torch.ones(3, device=device)\n(x.exp() * 2).sum().item()\n")
    run = measure_script(script, "sim")
    assert (run.model, run.mode) == ("my_model", "script") and run.counts["aten::exp"] == 1


def test_a_failing_workload_script_is_one_line_naming_the_file_and_the_line(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\n\nraise ValueError('no such model')\n")
    with pytest.raises(WorkloadError) as raised:
        measure_script(script, "sim")
    message = str(raised.value)
    assert "\n" not in message and "broken.py failed on sim: ValueError: no such model (broken.py:3)" in message


def test_demand_data_that_is_not_demand_data_is_one_clear_line():
    for text in ("not json", json.dumps({"format": 99}), json.dumps({"format": 1, "runs": [{"model": "x"}]})):
        with pytest.raises(DemandDataError, match="write it with `pu1-explorer demand -o FILE`"):
            demand_from_json(text)
    assert demand_from_json(shipped().to_json()).runs == shipped().runs


def run_command(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_explorer(*arguments, timeout=600, cwd=cwd, SIM_FALLBACK="silent")


@pytest.mark.parametrize(("arguments", "message"), [
    (["next-kernels", "--top", "0"], "--top 0: give a number of kernels of at least 1"),
    (["next-kernels", "--workload", "nowhere.py"], "--workload nowhere.py: no such .py file"),
    (["next-kernels", "--workload", "broken.py"], "broken.py failed on sim: ZeroDivisionError"),
    (["next-kernels", "--demand", "broken.py"], "broken.py is not demand data"),
    (["demand", "--no-zoo"], "--no-zoo measures only --workload scripts: give at least one"),
    (["demand", "--model", "alexnet"], "'alexnet' is not a model of the zoo"),
])
def test_bad_input_to_the_commands_is_one_line(tmp_path, arguments, message):
    (tmp_path / "broken.py").write_text("1 / 0\n")
    result = run_command(arguments, tmp_path)
    errors = [line for line in result.stderr.splitlines() if not line.startswith("[pu1-explorer]")]
    assert result.returncode == 1 and result.stdout == ""
    assert len(errors) == 1 and errors[0].startswith("pu1-explorer: error:") and message in errors[0], result.stderr


def test_the_demand_command_measures_a_workload_and_next_kernels_writes_every_format(tmp_path):
    (tmp_path / "tiny.py").write_text("import torch\ntorch.ones(2, device=device).exp().cpu()\n")
    result = run_command(["demand", "--no-zoo", "--workload", "tiny.py", "-o", "tiny.json"], tmp_path)
    assert result.returncode == 0, result.stderr
    written = demand_from_json((tmp_path / "tiny.json").read_text())
    assert [run.model for run in written.runs] == ["tiny"] and written.runs[0].counts["aten::exp"] == 1
    assert written.command == "pu1-explorer demand --no-zoo --workload tiny.py -o tiny.json"
    outputs = {}
    for format in ("md", "csv", "json"):
        result = run_command(["next-kernels", "--demand", "tiny.json", "--format", format], tmp_path)
        assert result.returncode == 0, result.stderr
        outputs[format] = result.stdout
    assert "no kernel is missing" in outputs["md"] and outputs["csv"].startswith("rank,operator,models")
    assert json.loads(outputs["json"])["models"] == ["tiny"]


TOY_RANKING = """
from pu1_explorer import coverage
from pu1_explorer.demand import TODAY, next_kernels, shipped
from pu1_explorer.op_coverage import COMPOSITES, PRIVATEUSE1_ROUTES, structured_delegates
snapshot = coverage("PrivateUse1", label="toy")
rows = snapshot.by_operator()
ranked = next_kernels(snapshot, shipped())
listed = {need.operator for need in ranked.needs}
lacking = {op for op in shipped().need() if op in rows and rows[op].transitive in TODAY}
left_out = {op: rows[op].backend in COMPOSITES and bool({structured_delegates().get(op), PRIVATEUSE1_ROUTES.get(op)}
                                                         & lacking) for op in lacking - listed}
print(json.dumps({"needs": [[need.operator, len(need.models), need.calls, need.today] for need in ranked.needs],
                  "status": {op: rows[op].transitive for op in listed}, "lacking": sorted(lacking),
                  "left_out": left_out, "today": TODAY, "headline": ranked.headline()}))
"""


def test_next_kernels_on_toy_ranks_its_missing_kernels_the_zoo_reaches(fixture_backend_env):
    """Every overload the zoo reaches that toy runs on the fallback is listed, but for composites that lack a kernel
    only through an overload they call (listed, or left out in turn); most models first, then most calls."""
    out = run_toy(TOY_RANKING, fixture_backend_env)
    needs = out["needs"]
    assert len(needs) > 30 and {operator for operator, *_ in needs} <= set(out["lacking"])
    assert all(out["left_out"].values()), out["left_out"]
    assert [(-models, -calls) for _, models, calls, _ in needs] == sorted((-models, -calls) for _, models, calls, _
                                                                           in needs)
    assert all(today == out["today"][out["status"][operator]] for operator, _, _, today in needs)
    assert f"toy lacks {len(needs)} kernels that the 15 models need" in out["headline"]
    assert {"aten::mm", "aten::addmm"} <= {operator for operator, *_ in needs}


def test_next_kernels_on_toy_from_the_command_line_ranks_a_users_workload_too(fixture_backend_env, tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        import torch
        x = torch.full((4, 4), 0.5, device=device)
        for _ in range(100):
            x = x.erfinv()
    """))
    arguments = ["next-kernels", "--import", "torch_toy", "--top", "1000", "--format", "json"]
    without = run_cli(arguments, fixture_backend_env, tmp_path)
    with_mine = run_cli(arguments + ["--workload", "mine.py"], fixture_backend_env, tmp_path)
    assert without.returncode == 0 and with_mine.returncode == 0, without.stderr + with_mine.stderr
    before, after = json.loads(without.stdout), json.loads(with_mine.stdout)
    assert after["models"] == before["models"] + ["mine"]
    erfinv = [need for need in after["needs"] if need["operator"].startswith("aten::erfinv")]
    assert [(need["models"], need["calls"]) for need in erfinv] == [(["mine"], 100)]
    assert not [need for need in before["needs"] if need["operator"].startswith("aten::erfinv")]


def test_the_pictures_show_each_backend_against_cuda_and_the_ranking_as_read_back_from_json():
    from pu1_explorer import against
    from pu1_explorer.demand import next_kernels_from_json
    from pu1_explorer.widgets.figures import against_figure, next_kernels_figure

    totals = against(coverage("PrivateUse1", label="sim"), "cuda").totals()
    figure = against_figure({"sim": totals, "again": totals})
    assert [bar.name for bar in figure.data] == ["own kernel", "through a composite", "CPU fallback", "nothing"]
    assert figure.data[0].x == (totals["by_status"]["own kernel"]["percent"],) * 2
    assert "CUDA's 1" in figure.layout.title.text
    ranked = next_kernels(coverage("PrivateUse1", label="sim"), shipped(), top=5)
    again = next_kernels_from_json(ranked.to_json())
    assert again.needs == ranked.needs and again.headline() == ranked.headline()
    bars = next_kernels_figure(again)
    assert list(bars.data[0].y) == [need.operator.removeprefix("aten::") for need in ranked.needs]
    assert list(bars.data[0].x) == [len(need.models) for need in ranked.needs]
