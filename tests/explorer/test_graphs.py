"""Captured graphs in the explorer: a backend's debug dump read back, its figure, and replay's hops against eager's."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from pu1_explorer.graphs import (GraphDumpError, compare_replay_with_eager, dump_graph, graph_dump_from_dict,
                                 read_graph_dump)
from pu1_explorer.widgets import graph_figure, replay_comparison_figure, replay_traces_figure
from tests.conftest import run_forked
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the run's one build of mydev)
from tests.vendor_backend import DEVICE


def tensor(number: int, shape=(4, 4)) -> dict:
    return {"id": f"t{number}", "address": hex(0x7F0000 + 256 * number), "shape": list(shape), "dtype": "float32"}


# y = (x @ w).relu(); total += y: three kernels, four tensors (x, w, the product, y, total)
DUMP = {"device": "sim:0", "pool": [0, 3], "kernels": [
    {"index": 0, "operator": "aten::mm", "kernel": "sim::mm", "reads": [tensor(0), tensor(1)], "writes": [tensor(2)]},
    {"index": 1, "operator": "aten::relu", "kernel": "sim::relu", "reads": [tensor(2)], "writes": [tensor(3)]},
    {"index": 2, "operator": "aten::add_.Tensor", "kernel": "sim::add_.Tensor", "reads": [tensor(4), tensor(3)],
     "writes": [tensor(4)]},
]}


def test_a_dump_reads_back_as_kernels_in_order_with_the_tensors_they_touch(tmp_path):
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(DUMP))
    dump = read_graph_dump(path)
    assert dump.device == "sim:0" and dump.pool == (0, 3)
    assert [kernel.operator for kernel in dump.kernels] == ["aten::mm", "aten::relu", "aten::add_.Tensor"]
    assert [t.id for t in dump.kernels[0].reads] == ["t0", "t1"] and dump.kernels[0].writes[0].shape == (4, 4)
    assert [t.id for t in dump.tensors] == ["t0", "t1", "t2", "t3", "t4"]
    assert dump.tensors[0].label == "t0 [4, 4] float32"
    assert dump.operator_counts() == {"aten::mm": 1, "aten::relu": 1, "aten::add_.Tensor": 1}
    assert graph_dump_from_dict(dump.to_dict()) == dump


@pytest.mark.parametrize("content, message", [
    (None, r"^\S+missing.json does not exist: call graph.debug_dump\("),
    ("digraph {}", r"^\S+graph.json is not JSON \(.*\): a graph dump is a JSON object"),
    (json.dumps({"hops": []}), r"^\S+graph.json is not a graph dump \(found \['hops'\]\): a graph dump is a JSON"),
    (json.dumps({**DUMP, "pool": "private"}), r"^\S+graph.json: 'pool' is 'private', not two integers"),
    (json.dumps({**DUMP, "kernels": [{"index": 0, "operator": "aten::mm", "reads": [{"id": "t0", "shape": "4x4",
                                                                                     "dtype": "float32"}]}]}),
     r"^\S+graph.json: kernel 0, read 0 has shape '4x4', not a list of integers"),
])
def test_a_file_that_is_not_a_dump_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / ("missing.json" if content is None else "graph.json")
    if content is not None:
        path.write_text(content)
    with pytest.raises(GraphDumpError, match=message) as error:
        read_graph_dump(path)
    assert "\n" not in str(error.value)


def test_the_graph_figure_marks_each_read_write_and_in_place_update():
    figure = graph_figure(graph_dump_from_dict(DUMP))
    marks = {trace.name: list(zip(trace.x, trace.y)) for trace in figure.data}
    assert marks["reads"] == [("t0 [4, 4] float32", "0. mm"), ("t1 [4, 4] float32", "0. mm"),
                              ("t2 [4, 4] float32", "1. relu"), ("t3 [4, 4] float32", "2. add_.Tensor")]
    assert marks["writes"] == [("t2 [4, 4] float32", "0. mm"), ("t3 [4, 4] float32", "1. relu")]
    assert marks["reads and writes (in place)"] == [("t4 [4, 4] float32", "2. add_.Tensor")]
    assert list(figure.layout.yaxis.categoryarray) == ["0. mm", "1. relu", "2. add_.Tensor"]
    assert figure.layout.yaxis.automargin and figure.layout.xaxis.automargin  # labels are never cut off
    assert "3 kernels, 5 tensors" in figure.layout.title.text.replace("<br>", " ")  # lines broken for a phone
    wide = graph_figure(graph_dump_from_dict(DUMP), shapes_in_labels=False, max_kernels=2)
    assert list(wide.layout.xaxis.categoryarray) == ["t0", "t1", "t2", "t3"]
    assert "2 of 3 kernels" in wide.layout.title.text.replace("<br>", " ")


CAPTURE = textwrap.dedent("""
    import json, sys, torch
    import torch_{device}
    from pu1_explorer.graphs import compare_replay_with_eager, read_graph_dump
    x, w = torch.randn(8, 8, device="{device}"), torch.randn(8, 8, device="{device}")
    total = torch.zeros(8, 8, device="{device}")
    def step():
        total.add_((x @ w).relu())
    comparison = compare_replay_with_eager(step, "{device}")
    expected = total.cpu() + (x.cpu() @ w.cpu()).relu()
    comparison_graph = comparison.graph
    graph = torch.accelerator.Graph()
    graph.enable_debug_mode()
    with torch.Stream(device="{device}"), graph:
        step()
    graph.debug_dump(sys.argv[1] if len(sys.argv) > 1 else "{path}")
    graph.replay()
    print(json.dumps({{"eager": comparison.eager_hops, "replay": comparison.replay_hops,
                      "by_key": comparison.eager_by_key, "replayed": torch.equal(total.cpu(), expected),
                      "operators": [k.operator for k in comparison_graph.kernels]}}))
""")


def test_the_templates_backend_dumps_a_graph_the_explorer_reads(vendor_backend, tmp_path):  # noqa: F811
    """Another backend's dump: the one `pu1-explorer new` generates captures a step, dumps it, and replays it."""
    path = tmp_path / "graph.json"
    result = run_forked(["-c", CAPTURE.format(device=DEVICE, path=path)], timeout=300, **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    on_sim = run_forked(["-c", CAPTURE.format(device="sim", path=tmp_path / "sim.json")], timeout=300)
    assert on_sim.returncode == 0, on_sim.stderr[-3000:]
    # sim's code under another name: the same kernels captured as on sim
    assert measured["replayed"] and measured["operators"] == json.loads(on_sim.stdout.splitlines()[-1])["operators"]
    assert measured["eager"] > measured["replay"] and measured["by_key"]["PrivateUse1"] >= 3
    dump = read_graph_dump(path)
    assert dump.device == f"{DEVICE}:0" and [k.operator for k in dump.kernels] == measured["operators"]
    product, relu, add = dump.kernels
    assert product.writes[0].id in {t.id for t in relu.reads}  # the product flows into relu, relu's result into add_
    assert relu.writes[0].id in {t.id for t in add.reads}
    assert add.writes[0].id not in {product.writes[0].id, relu.writes[0].id}  # add_ writes into `total`
    assert graph_figure(dump).data[0].x


def test_sim_replays_a_captured_step_with_fewer_hops_than_eager():
    import torch_sim  # noqa: F401

    x, w = torch.randn(64, 64, device="sim"), torch.randn(64, 64, device="sim", requires_grad=True)
    out = torch.zeros(64, 64, device="sim")

    def step() -> None:  # a forward and backward pass: the hops a replay removes are autograd's and sim's own
        y = (x @ w).relu() * 2
        y.sum().backward()
        out.copy_(y.detach())

    comparison = compare_replay_with_eager(step, "sim")
    assert torch.equal(out.cpu(), ((x.cpu() @ w.detach().cpu()).relu() * 2))
    assert comparison.eager_by_operator["aten::mm"] >= 1 and comparison.eager_hops > comparison.replay_hops
    assert comparison.removed_hops == comparison.eager_hops - comparison.replay_hops
    assert comparison.graph is not None and "aten::mm" in comparison.graph.operator_counts()
    figure = replay_comparison_figure(comparison)
    names = [trace.name for trace in figure.data]
    assert names.count("eager") == 2 and names.count("graph replay") == 2
    title = figure.layout.title.text.replace("<br>", " ")
    assert f"{comparison.eager_hops} hops eagerly, {comparison.replay_hops} in a replay" in title
    assert replay_traces_figure(comparison).layout.annotations[0].text == f"eager: {comparison.eager_hops} hops"


def test_dump_graph_reads_a_captured_graph_through_a_temporary_file():
    class FakeGraph:
        def debug_dump(self, path: str) -> None:
            Path(path).write_text(json.dumps(DUMP))

    assert [k.operator for k in dump_graph(FakeGraph()).kernels] == ["aten::mm", "aten::relu", "aten::add_.Tensor"]
