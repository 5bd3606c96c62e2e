"""Computed dispatch tables: kinds, provenance, key names and unknown operators."""
from pathlib import Path

import pytest
import torch

from pu1_explorer import UnknownOperatorError, computed_table, dispatch_table, resolve_operator
from pu1_explorer.dispatch_tables import canonical_key


def kinds(operator, keys):
    return [entry.kind for entry in dispatch_table(operator, keys)]


def test_kernel_kinds_of_well_known_operators():
    assert kinds("add.Tensor", ["CPU", "AutogradCPU", "AutocastCPU"]) == ["kernel", "autograd", "fallthrough"]
    assert kinds("linear", ["CPU", "PrivateUse1", "AutogradPrivateUse1"]) == ["composite_implicit"] * 3
    assert kinds("ones", ["PrivateUse1"]) == ["composite_explicit"]
    assert kinds("convolution_overrideable", ["PrivateUse1"]) == ["kernel"]
    assert kinds("cudnn_convolution", ["CPU"]) == ["missing"]
    assert kinds("special_erfcx.out", ["PrivateUse1"]) == ["fallback"]


def test_composite_explicit_nonfunctional_is_told_apart():
    assert kinds("atan2", ["PrivateUse1"]) == ["composite_explicit_nonfunctional"]


def test_provenance_names_the_registering_file():
    sim_add = dispatch_table("add.Tensor", ["PrivateUse1"])[0]
    assert sim_add.file.endswith("operators_direct.cpp") and sim_add.line > 0  # a direct kernel
    # the file as it sits in the project, with no folder of this machine
    assert sim_add.provenance == f"backend/torch_sim/csrc/{Path(sim_add.file).name}:{sim_add.line}"
    assert dispatch_table("add.Tensor", ["CPU"])[0].provenance.startswith("build/aten/src/ATen/RegisterCPU")
    silu = dispatch_table("silu", ["AutogradPrivateUse1"])[0]
    assert silu.is_python and silu.file.endswith("autograd.py")
    assert dispatch_table("cudnn_convolution", ["CPU"])[0].provenance == ""


def test_names_are_normalised():
    assert resolve_operator("torch.ops.aten.mul.Tensor") == "aten::mul.Tensor"
    assert resolve_operator("aten.relu.default") == "aten::relu"
    assert resolve_operator(torch.ops.aten.add.Tensor) == "aten::add.Tensor"
    assert resolve_operator("relu") == "aten::relu"


def test_unknown_operator_suggests_close_matches():
    with pytest.raises(UnknownOperatorError, match="did you mean aten::add.Tensor"):
        dispatch_table("addd.Tensor")


def test_ambiguous_name_lists_the_overloads():
    with pytest.raises(UnknownOperatorError, match="aten::add.Tensor"):
        resolve_operator("add")


def test_backend_name_spelling_of_keys():
    assert canonical_key("sim") == "PrivateUse1"
    assert canonical_key("AutogradSim") == "AutogradPrivateUse1"
    with pytest.raises(ValueError, match="unknown dispatch key 'Autogrd'"):
        canonical_key("Autogrd")


def test_whole_table_has_every_key_with_a_kernel():
    table = computed_table("add.Tensor")
    assert table["PrivateUse1"].kind == "kernel" and table["Meta"].kind == "kernel"
