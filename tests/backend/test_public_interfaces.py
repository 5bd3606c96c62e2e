"""The project's C++ (sim's, the explorer's and the example backends') reaches torch through its public interfaces: no
call of an underscore member, except the operators and process-group methods a backend must implement, whose names
torch gives an underscore."""
from __future__ import annotations

import re
from pathlib import Path

import pu1_explorer
import torch

import torch_sim

CSRC = Path(torch_sim.__file__).parent / "csrc"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPLORER_CSRC = Path(pu1_explorer.__file__).parent / "csrc"

# A call of an underscore name through a member (`t._set_conj(`, `impl->_x(`) or a namespace (`at::_x(`).
UNDERSCORE_CALL = re.compile(r"(?:\.|->|::)\s*(_[a-z]\w*)\s*\(")

# The underscore names the project's C++ may call, and why each has no public form.
INTEGRATION_POINTS = {
    "_allgather_base": "c10d's Backend method behind all_gather_into_tensor: simccl overrides it and delegates "
                       "to its host group",
    "_reduce_scatter_base": "c10d's Backend method behind reduce_scatter_tensor: simccl overrides it and "
                            "delegates to its host group",
    "_assert_async_cpu": "the CPU's kernel of aten::_assert_async, the operator sim's kernel implements",
    "_assert_async_msg_cpu": "the CPU's kernel of aten::_assert_async.msg, the operator sim's kernel implements",
}


def underscore_calls(source: str) -> list[str]:
    """The underscore names a C++ source calls, comments and string literals left out."""
    code = re.sub(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', "", source, flags=re.S)
    return UNDERSCORE_CALL.findall(code)


def test_the_check_finds_member_and_namespace_calls_and_skips_comments_and_strings():
    source = ("handle._set_conj(true);\nimpl->_set_neg(true);\nreturn at::_local_scalar_dense(x);\n"
              "// t._in_a_comment()\nat::Tensor _not_a_call;\nx.item();\nrefuse(\"aten::_in_a_message (.item())\");\n")
    assert underscore_calls(source) == ["_set_conj", "_set_neg", "_local_scalar_dense"]


def test_the_projects_cpp_calls_no_underscore_member_of_torch_but_the_integration_points():
    files = sorted([*CSRC.glob("*.cpp"), *CSRC.glob("*.h"), *EXAMPLES.glob("*/csrc/*.cpp"),
                    *EXPLORER_CSRC.glob("*.cpp")])
    assert CSRC / "operators.cpp" in files and EXAMPLES / "toy" / "csrc" / "toy.cpp" in files
    assert EXPLORER_CSRC / "operator_counter.cpp" in files
    found = {f"{path.name}: {name}" for path in files for name in underscore_calls(path.read_text())
             if name not in INTEGRATION_POINTS}
    assert found == set(), "the project's C++ calls underscore members of torch; use their public forms"


def test_tensors_whose_lazy_bits_sim_carries_keep_them_on_every_route():
    z = torch.tensor([1 + 2j, 3 - 1j])
    conjugated = z.to("sim").conj()
    negated = conjugated.imag  # a view with the negative bit
    assert conjugated.is_conj() and negated.is_neg()
    torch.sim.reset_direct_route_exits()
    assert torch.equal((conjugated * 1).cpu(), z.conj() * 1)  # a direct kernel's handle keeps the conjugate bit
    assert torch.equal(negated.exp().cpu(), z.conj().imag.exp())  # ... and the negative bit
    assert torch.sim.direct_route_exits() == {}, "mul or exp left the direct route"
    assert torch.equal(negated.cumsum(0).cpu(), z.conj().imag.cumsum(0))  # a host kernel's alias (no direct cumsum)
    assert conjugated[0].item() == 1 - 2j and negated[1].item() == 1.0  # .item() reads through either bit
