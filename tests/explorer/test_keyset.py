"""The key set as bits: positions read from torch, what the thread adds and removes, where dispatch starts."""
import contextlib
import textwrap

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pu1_explorer import key_set
from pu1_explorer.keyset import layout, priority_order
from pu1_explorer.widgets import KeySetView
from pu1_explorer.widgets.figures import key_set_figure
from tests.conftest import run_forked
from tests.explorer.test_foreign_backend import FOREIGN_BACKEND

DispatchKey, DispatchKeySet = torch.DispatchKey, torch.DispatchKeySet


def effective_names(bits):
    return {bit.name for bit in bits if bit.effective}


def test_the_layout_is_read_from_torch_and_sim_borrows_the_privateuse1_bit():
    backends, functionalities, runtime = layout()
    assert backends[0] == "CPU" and "PrivateUse1" in backends.values() and "Meta" in backends.values()
    assert not set(backends) & set(functionalities) and len(backends) + len(functionalities) <= 64
    assert max(backends) < min(functionalities)  # backend bits are the low bits
    private = next(index for index, name in backends.items() if name == "PrivateUse1")
    autograd = next(index for index, name in functionalities.items() if name == "AutogradFunctionality")
    dense = next(index for index, name in functionalities.items() if name == "Dense")
    assert runtime[(autograd, private)] == "AutogradPrivateUse1" and runtime[(dense, private)] == "PrivateUse1"
    # the table agrees with torch's own key sets, bit for bit
    for (functionality, backend), name in runtime.items():
        assert DispatchKeySet(DispatchKey.__members__[name]).raw_repr() == (1 << functionality) | (1 << backend)
    for index, name in functionalities.items():
        if name in DispatchKey.__members__:
            assert DispatchKeySet(DispatchKey.__members__[name]).raw_repr() == 1 << index, name
    assert torch._C._dispatch_key_for_device(torch.device("privateuseone").type) == "PrivateUse1"


def test_a_sim_tensor_sets_the_privateuse1_bit_and_a_cpu_tensor_the_cpu_bit():
    tensor = torch.ones(2, device="sim", requires_grad=True)
    picture = key_set(tensor)
    assert effective_names(picture.backend_bits) == {"PrivateUse1"} and picture.device_name == "sim"
    assert {"Dense", "AutogradFunctionality", "ADInplaceOrView"} <= effective_names(picture.functionality_bits)
    assert {key.name for key in picture.runtime_keys if key.effective} == {"PrivateUse1", "AutogradPrivateUse1"}
    # outside autocast, the thread's exclude set removes the tensor's autocast bit
    assert picture.bit("AutocastPrivateUse1").in_tensor and picture.bit("AutocastPrivateUse1").excluded
    assert picture.first_key == "AutogradPrivateUse1" and picture.label == "float32 tensor on sim:0, requires grad"
    assert picture.raw == torch._C._dispatch_keys(tensor).raw_repr()
    real = (torch._C._dispatch_keys(tensor) | torch._C._dispatch_tls_local_include_set()) - \
        torch._C._dispatch_tls_local_exclude_set()
    assert picture.effective == real.raw_repr() and picture.first_key == real.highestPriorityTypeId().name
    on_cpu = key_set(torch.ones(2))
    assert effective_names(on_cpu.backend_bits) == {"CPU"} and on_cpu.first_key == "AutogradCPU"
    assert key_set("meta").first_key == "AutogradMeta"


def test_the_order_is_torchs_priority_order():
    picture = key_set(torch.ones(2, device="sim"))
    assert picture.keys == ["AutogradPrivateUse1", "ADInplaceOrView", "BackendSelect", "PrivateUse1"]
    assert priority_order(0) == [] and key_set(DispatchKeySet(DispatchKey.Undefined),
                                               include_thread_local=False).first_key == "Undefined"
    printed = str(DispatchKeySet.from_raw_repr(picture.effective))  # torch prints a set lowest priority first
    assert printed[printed.index("(") + 1:-1].split(", ") == picture.keys[::-1]


def test_the_threads_sets_change_the_picture_as_measured():
    tensor = torch.ones(2, device="sim")
    outside = key_set(tensor)
    assert outside.bit("BackendSelect").included and outside.bit("ADInplaceOrView").in_tensor
    with torch.autocast("sim", dtype=torch.bfloat16):
        inside = key_set(tensor)
    assert not inside.bit("AutocastPrivateUse1").excluded and inside.first_key == "AutocastPrivateUse1"
    assert inside.exclude == outside.exclude & ~(1 << inside.bit("AutocastPrivateUse1").index)
    with torch.no_grad():  # grad mode is a flag the autograd kernel reads, not a key: the sets do not change
        no_grad = key_set(tensor)
    assert (no_grad.include, no_grad.exclude, no_grad.first_key) == (outside.include, outside.exclude,
                                                                     "AutogradPrivateUse1")
    with torch._C._AutoDispatchBelowAutograd():
        below = key_set(tensor)
    assert below.bit("AutogradFunctionality").excluded and below.first_key == "ADInplaceOrView"
    with torch.inference_mode():  # excludes the autograd bits, stops including ADInplaceOrView
        inference = key_set(tensor)
        made_inside = key_set(torch.ones(2, device="sim"))  # an inference tensor has neither bit
    assert inference.bit("AutogradFunctionality").excluded and inference.first_key == "ADInplaceOrView"
    assert outside.include >> inference.bit("ADInplaceOrView").index & 1
    assert not inference.include >> inference.bit("ADInplaceOrView").index & 1
    assert made_inside.keys == ["BackendSelect", "PrivateUse1"]
    plain = key_set(tensor, include_thread_local=False)
    assert plain.include == plain.exclude == 0 and not plain.bit("AutocastPrivateUse1").excluded
    assert plain.first_key == "AutocastPrivateUse1"


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def probe():
    """An operator with a kernel on every key in question that records which key the real dispatcher called first
    and the key set it handed over."""
    library = torch.library.Library("pu1_keyset_probe", "DEF")
    library.define("probe(Tensor x) -> Tensor")
    calls: list[tuple[str, int]] = []
    for key in ["PythonTLSSnapshot", "Python", "AutocastPrivateUse1", "AutocastCPU", "AutogradPrivateUse1",
                "AutogradCPU", "AutogradMeta", "ADInplaceOrView", "BackendSelect", "PrivateUse1", "CPU", "Meta"]:
        def kernel(keyset, x, key=key):
            calls.append((key, keyset.raw_repr()))
            return x
        library.impl("probe", kernel, key, with_keyset=True)

    def first(tensor):
        calls.clear()
        torch.ops.pu1_keyset_probe.probe(tensor)
        return calls[0]
    yield first
    del library  # its finalizer removes the kernels


CONTEXTS = {"plain": contextlib.nullcontext, "no_grad": torch.no_grad,
            "autocast": lambda: torch.autocast("sim", dtype=torch.bfloat16),
            "below autograd": torch._C._AutoDispatchBelowAutograd, "inference": torch.inference_mode,
            "dispatch mode": PassThrough}


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("device", ["sim", "cpu", "meta"])
def test_the_first_key_is_where_the_real_dispatcher_starts(probe, context, device):
    with CONTEXTS[context]():
        tensor = torch.ones(2, device=device, requires_grad=context not in ("inference", "below autograd"))
        picture = key_set(tensor)
        called, handed = probe(tensor)
    assert picture.first_key == called
    assert picture.effective == handed  # the dispatcher's computed key set, bit for bit


def test_any_privateuse1_name_works():
    program = FOREIGN_BACKEND + textwrap.dedent("""
        from pu1_explorer import key_set
        from pu1_explorer.widgets.figures import key_set_figure
        picture = key_set(torch.empty(3, device="tiny"))
        figure = key_set_figure(picture)
        print(picture.device_name, picture.first_key, [b.name for b in picture.backend_bits if b.effective],
              "PrivateUse1 (tiny)" in figure.data[0].x)
    """)
    result = run_forked(["-c", program], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["tiny", "AutogradPrivateUse1", "['PrivateUse1']", "True"]


def test_the_figure_draws_the_bits_and_the_widget_redraws():
    picture = key_set(torch.ones(2, device="sim"))
    figure = key_set_figure(picture)
    grid, strip = figure.data[0], figure.data[1]
    column = list(grid.x).index("PrivateUse1 (sim)")
    rows = list(grid.y)
    assert grid.z[0][column] == 1 and sum(map(sum, grid.z)) == 3  # the backend bit, Dense and Autograd × PrivateUse1
    assert grid.text[rows.index("AutogradFunctionality (bit 36)")][column] == "1st"
    assert all(value == 0 for row in grid.z for index, value in enumerate(row) if index != column)
    assert "AutocastPrivateUse1 (bit 48)" in strip.y and "exclude" in strip.text[list(strip.y).index(
        "AutocastPrivateUse1 (bit 48)")][0]
    assert figure.layout.title.text.startswith("float32 tensor on sim:0: dispatch starts at AutogradPrivateUse1<br>")
    assert "<b>12 PrivateUse1 (sim)</b>" in figure.layout.xaxis.ticktext
    view = KeySetView(torch.ones(2, device="sim"))
    assert view.picture.first_key == "AutogradPrivateUse1"
    view.thread_local.value = False
    assert view.picture.exclude == 0 and view.picture.first_key == "AutocastPrivateUse1"
    assert "Plotly.newPlot" in view.static_html() and KeySetView().picture.label == "new float32 tensor on sim:0"
    assert KeySetView(device="cpu", title="host").figure().layout.title.text.startswith(
        "host: dispatch starts at AutogradCPU")
    with pytest.raises(TypeError, match="not both"):
        KeySetView(torch.ones(1), device="cpu")


def test_bad_subjects_get_one_clear_line():
    with pytest.raises(ValueError, match="'nosuchdev' is not a device.*pass a tensor, a device such as 'sim'"):
        key_set("nosuchdev")
    with pytest.raises(ValueError, match=r"^cannot make a tensor on cuda in this process \(Torch not compiled"):
        key_set("cuda")
    with pytest.raises(TypeError, match="takes a tensor, a device, a DispatchKey or a DispatchKeySet, not int"):
        key_set(3)
    with pytest.raises(TypeError):
        key_set(torch.ones(1), True)  # include_thread_local is keyword-only
    for bad in ("nosuchdev", "cuda", "xla"):
        with pytest.raises(ValueError) as error:
            key_set(bad)
        assert "\n" not in str(error.value) and len(str(error.value)) < 400
