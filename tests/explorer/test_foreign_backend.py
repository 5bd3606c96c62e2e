"""The engine works on a PrivateUse1 backend this project did not write (pure Python, in a fresh process)."""
import textwrap

from tests.conftest import run_forked

FOREIGN_BACKEND = textwrap.dedent("""
    import torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend("tiny")
    library = torch.library.Library("aten", "IMPL")

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return torch._C._acc.create_empty_tensor(size, dtype or torch.float32)

    def add(a, b, alpha=1):
        return torch._C._acc.create_empty_tensor(a.shape, a.dtype)

    library.impl("empty.memory_format", empty, "PrivateUse1")
    library.impl("add.Tensor", add, "PrivateUse1")
""")


def test_tables_coverage_trace_and_fallback_report_on_a_foreign_backend():
    program = FOREIGN_BACKEND + textwrap.dedent("""
        import pu1_explorer
        from pu1_explorer.fallback_report import monitor_fallbacks
        assert not hasattr(torch, "sim")
        entry = pu1_explorer.dispatch_table("add.Tensor", ["tiny"])[0]
        print("table", entry.kind, entry.is_python)
        snapshot = pu1_explorer.coverage("tiny")
        rows = snapshot.by_operator()
        print("coverage", snapshot.label, rows["aten::add.Tensor"].backend, rows["aten::mul.Tensor"].backend)
        print("transitive", rows["aten::mul.Tensor"].transitive, rows["aten::mul.out"].backend)
        x = torch.empty(3, device="tiny")
        with pu1_explorer.trace("tiny") as recorded:
            x + x
        print("trace", [f"{hop.key}:{hop.kind}" for hop in recorded.hops if not hop.skipped])
        with monitor_fallbacks("tiny") as report:
            x + x
        print("fallbacks", report.total, report.backend)
    """)
    result = run_forked(["-c", program], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert lines["table"] == "kernel True"
    assert lines["coverage"] == "tiny kernel composite_explicit_nonfunctional"
    assert lines["transitive"] == "missing missing"  # no kernel and no fallback: mul cannot run on tiny
    assert lines["trace"] == "['AutogradPrivateUse1:autograd', 'PrivateUse1:kernel']"
    assert lines["fallbacks"] == "0 tiny"
