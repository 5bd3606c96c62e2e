"""The runtime fallback report: which operators fell back, how often, with which shapes, from where."""
import pytest
import torch

from pu1_explorer.fallback_report import fallback_operators, monitor_fallbacks


def test_counts_shapes_and_call_sites():
    x = torch.rand(10, device="sim")
    with monitor_fallbacks("sim") as report:
        torch.special.erfcx(x)
        torch.special.erfcx(x[:4])
        (x * 2).sum()  # native kernels: not in the report
    assert report.total == 2
    entry = report.calls["aten::special_erfcx.out"]
    assert entry.count == 2
    assert set(entry.shapes) == {"[10]:float32, [10]:float32", "[4]:float32, [4]:float32"}
    site = next(iter(entry.call_sites))
    # the file as it sits in the project, with no folder of this machine
    assert site.startswith("tests/explorer/test_fallback_report.py:") and "test_counts_shapes_and_call_sites" in site
    assert "aten::special_erfcx.out" in report.to_markdown()


@pytest.mark.filterwarnings("ignore:The operator 'aten::.*' has no sim kernel")
def test_a_fallback_in_a_backward_pass_names_the_autograd_node_that_called_it():
    x = torch.rand(5, device="sim", requires_grad=True)
    loss = torch.lgamma(x).sum()
    with monitor_fallbacks("sim") as report:
        loss.backward()  # lgamma's derivative is digamma, which sim leaves to the fallback
    assert dict(report.calls["aten::digamma.out"].call_sites) == {"(backward: LgammaBackward0)": 1}


def test_only_fallback_operators_are_watched_and_tables_restored():
    operators = fallback_operators("sim")
    assert "aten::special_erfcx.out" in operators and "aten::mul.Tensor" not in operators
    before = torch._C._dispatch_dump_table("aten::special_erfcx.out")
    with monitor_fallbacks("sim") as report:
        pass
    assert report.watched_operators == len(operators)
    assert torch._C._dispatch_dump_table("aten::special_erfcx.out") == before
