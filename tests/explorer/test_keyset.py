"""The key set as bits: positions read from torch, what the thread adds and removes, where dispatch starts."""
import pytest
import torch

from pu1_explorer import key_set
from pu1_explorer.keyset import layout
from pu1_explorer.widgets import KeySetView
from pu1_explorer.widgets.figures import key_set_figure


def effective_names(picture, bits):
    return {bit.name for bit in bits if bit.effective}


def test_the_layout_is_read_from_torch_and_sim_borrows_the_privateuse1_bit():
    backends, functionalities, runtime = layout()
    assert backends[0] == "CPU" and "PrivateUse1" in backends.values() and "Meta" in backends.values()
    assert not set(backends) & set(functionalities) and len(backends) + len(functionalities) <= 64
    private = next(index for index, name in backends.items() if name == "PrivateUse1")
    autograd = next(index for index, name in functionalities.items() if name == "AutogradFunctionality")
    assert runtime[(autograd, private)] == "AutogradPrivateUse1"
    word = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradPrivateUse1).raw_repr()
    assert word == (1 << private) | (1 << autograd)


def test_a_sim_tensor_sets_the_privateuse1_bit_and_dispatch_starts_where_the_dispatcher_starts():
    tensor = torch.ones(2, device="sim", requires_grad=True)
    picture = key_set(tensor)
    assert effective_names(picture, picture.backend_bits) == {"PrivateUse1"} and picture.device_name == "sim"
    assert {"Dense", "AutogradFunctionality", "ADInplaceOrView"} <= effective_names(picture, picture.functionality_bits)
    assert {key.name for key in picture.runtime_keys if key.effective} == {"PrivateUse1", "AutogradPrivateUse1"}
    # outside autocast, the thread's exclude set removes the tensor's autocast bit
    assert picture.bit("AutocastPrivateUse1").in_tensor and picture.bit("AutocastPrivateUse1").excluded
    assert picture.first_key == "AutogradPrivateUse1"
    real = (torch._C._dispatch_keys(tensor) | torch._C._dispatch_tls_local_include_set()) - \
        torch._C._dispatch_tls_local_exclude_set()
    assert picture.first_key == real.highestPriorityTypeId().name
    assert key_set(torch.ones(2)).first_key == "AutogradCPU"
    assert effective_names(key_set(torch.ones(2)), key_set(torch.ones(2)).backend_bits) == {"CPU"}


def test_the_threads_sets_change_the_picture_inside_autocast_and_below_autograd():
    tensor = torch.ones(2, device="sim")
    with torch.autocast("sim", dtype=torch.bfloat16):
        inside = key_set(tensor)
    assert not inside.bit("AutocastPrivateUse1").excluded and inside.first_key == "AutocastPrivateUse1"
    with torch._C._AutoDispatchBelowAutograd():
        below = key_set(tensor)
    assert below.bit("AutogradFunctionality").excluded and below.first_key == "ADInplaceOrView"
    plain = key_set(tensor, include_thread_local=False)
    assert plain.include == plain.exclude == 0 and not plain.bit("AutocastPrivateUse1").excluded


def test_the_figure_draws_the_bits_and_the_widget_redraws():
    picture = key_set("sim")
    figure = key_set_figure(picture)
    grid = figure.data[0]
    column = list(grid.x).index("PrivateUse1 (sim)")
    assert grid.z[0][column] == 1 and sum(map(sum, grid.z)) >= 3  # the backend bit, Dense and Autograd × PrivateUse1
    assert "dispatch starts at AutogradPrivateUse1" in figure.layout.title.text
    view = KeySetView("sim")
    view.thread_local.value = False
    assert view.picture.exclude == 0 and "Plotly.newPlot" in view.static_html()


def test_bad_subjects_get_one_clear_line():
    with pytest.raises(ValueError, match="'nosuchdev' is not a device.*pass a tensor, a device such as 'sim'"):
        key_set("nosuchdev")
    with pytest.raises(TypeError, match="takes a tensor, a device or a DispatchKeySet, not int"):
        key_set(3)
