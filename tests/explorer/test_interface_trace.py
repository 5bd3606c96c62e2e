"""The explorer's interface trace: user lines -> operators -> interface calls, beside the dispatcher's hops."""
import json
import os
import textwrap

import pytest

from pu1_explorer.interface_trace import (CODE_FILENAME, CallPath, InterfaceTraceUnavailable, call_path_from_json,
                                          trace_call_path)
from pu1_explorer.widgets import call_path
from pu1_explorer.widgets.call_path import call_path_html
from tests.conftest import run_explorer, run_forked
from tests.vendor_backend import DEVICE, build_vendor_backend, vendor_environment

DEVICE_INDEX_EXAMPLE = 'with torch.accelerator.device_index(1):\n    torch.randn(100, device="sim:1")'


@pytest.fixture(scope="module")
def device_index_path() -> CallPath:
    return trace_call_path(DEVICE_INDEX_EXAMPLE, device="sim")


def test_lines_hold_operators_that_hold_interface_calls(device_index_path):
    tree = device_index_path.tree()
    assert [node.python for node in tree[:2]] == [f"{CODE_FILENAME}:1", f"{CODE_FILENAME}:2"]
    assert tree[0].label.endswith("with torch.accelerator.device_index(1):")  # the line's own text
    assert "guard.exchangeDevice(device=sim:1)" in [call.label for call in tree[0].children]
    randn = tree[1].children[0]
    assert (randn.kind, randn.label) == ("operator", "aten::randn")
    inside = [call.label for call in randn.calls()]
    assert inside.index("allocator.allocate(nbytes=400 device=1)") < inside.index("hooks.getDefaultGenerator(device=1)")
    last = [node for node in tree if node.python == f"{CODE_FILENAME}:1"][-1]
    assert "guard.uncheckedSetDevice(device=sim:0)" in [call.label for call in last.children]  # the exchange back


def test_the_dispatch_trace_comes_from_the_same_run(device_index_path):
    assert device_index_path.error is None
    hops = [(hop.operator, hop.key) for hop in device_index_path.dispatch.hops if not hop.skipped]
    assert ("aten::randn", "PrivateUse1") in hops and ("aten::normal_", "PrivateUse1") in hops
    methods_after_lazy_init = [m for m in device_index_path.methods() if m != "device_module._lazy_init"]
    assert methods_after_lazy_init[0] == "guard.exchangeDevice"  # _lazy_init comes first in a fresh process
    assert "aten::randn" in device_index_path.to_text()


def test_json_round_trip(device_index_path):
    again = call_path_from_json(device_index_path.to_json())
    assert again.to_dict() == device_index_path.to_dict()
    assert [node.label for node in again.tree()] == [node.label for node in device_index_path.tree()]


def test_a_callable_and_an_error_are_traced():
    import torch

    def body():
        torch.ones(2, device="sim")
        raise ValueError("stop here")

    path = trace_call_path(body, device="sim", dispatch=False)
    assert path.error == "ValueError: stop here"
    assert "allocator.allocate" in path.methods()
    assert path.dispatch is None and "def body" in path.code


def test_widget_builds_and_renders_statically(monkeypatch):
    monkeypatch.setenv("EXPLORER_STATIC", "1")
    widget = call_path(DEVICE_INDEX_EXAMPLE, device="sim")
    html = widget._repr_mimebundle_()["text/html"]
    assert "Interface calls on sim" in html and "Dispatcher hops" in html
    assert "getDefaultGenerator" in html and "aten::randn @ PrivateUse1" in html
    assert "<script" not in call_path_html(widget.path)  # plain HTML: it needs no kernel and no script


def test_backend_without_the_protocol_gets_one_clear_error():
    with pytest.raises(InterfaceTraceUnavailable, match=r"torch.cpu has no start_interface_trace\(\)") as error:
        trace_call_path("torch.ones(2)", device="cpu")
    assert "\n" not in str(error.value)
    widget = call_path("torch.ones(2)", device="cpu")
    assert widget.path is None and "offers no interface trace" in widget.static_html()


def test_cli_prints_json_and_refuses_a_backend_without_the_protocol():
    command = ["trace", "--interfaces", "--format", "json"]
    done = run_explorer(*command, DEVICE_INDEX_EXAMPLE, "--device", "sim")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    methods = [(r["interface"], r["method"]) for r in data["records"] if r["kind"] == "call"]
    assert ("hooks", "getDefaultGenerator") in methods and data["dispatch"]["hops"]
    refused = run_explorer(*command, "torch.ones(2)", "--device", "cpu")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("pu1-explorer: error: InterfaceTraceUnavailable:")


@pytest.fixture(scope="session")
def vendor_backend(tmp_path_factory) -> dict[str, str]:
    """The environment of a fresh interpreter that imports the generated mydev backend (the same build, folder and
    lock as tests/explorer/test_new_backend.py, so one run builds it once)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with FileLock(str(shared / "vendor-backend.lock")):
        return vendor_environment(build_vendor_backend(shared / "vendor-backend"))


def test_the_vendor_template_offers_the_interface_trace(vendor_backend):
    code = textwrap.dedent(f"""
        import json, threading
        import torch, torch_{DEVICE}
        from pu1_explorer.interface_trace import trace_call_path
        path = trace_call_path('with torch.accelerator.device_index(1):\\n    torch.randn(100, device="{DEVICE}:1")',
                               device="{DEVICE}")
        torch.{DEVICE}.start_interface_trace()
        try:
            torch.{DEVICE}.start_interface_trace()
        except RuntimeError as error:
            twice = str(error)
        torch.{DEVICE}.stop_interface_trace()
        print(json.dumps({{"error": path.error, "methods": path.methods(), "lines": [n.python for n in path.tree()],
                          "threads": sorted({{r.thread for r in path.records}}), "me": threading.get_native_id(),
                          "twice": twice}}))
    """)
    result = run_forked(["-c", code], **vendor_backend)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["error"] is None and seen["threads"] == [seen["me"]]
    methods = seen["methods"]
    assert methods.index("guard.exchangeDevice") < methods.index("allocator.allocate")
    assert methods[-2] == "guard.uncheckedSetDevice"  # the exchange back when the block ends
    assert seen["lines"][:2] == [f"{CODE_FILENAME}:1", f"{CODE_FILENAME}:2"]
    assert seen["twice"].startswith("an interface trace is already on")


def test_a_long_run_is_cut_in_the_widget():
    path = trace_call_path("for _ in range(300):\n    torch.ones(2, device=device) * 2", device="sim", dispatch=False)
    html = call_path_html(path, max_items=50)
    assert html.count("<li") == 51 and "cut after 50 items" in html
