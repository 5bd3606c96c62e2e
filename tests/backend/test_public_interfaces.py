"""The project reaches torch through its public interfaces. Its C++ (sim's, the explorer's and the example backends')
calls no underscore member, except the operators and process-group methods a backend must implement, whose names
torch gives an underscore; its Python (sim's, the explorer's and the tests') names no private member of torch or of
`sys` but for a published list of those that have no public equivalent, each with its reason."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pu1_explorer
import torch

import torch_sim

CSRC = Path(torch_sim.__file__).parent / "csrc"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPLORER_CSRC = Path(pu1_explorer.__file__).parent / "csrc"
PYTHON_PACKAGES = [Path(pu1_explorer.__file__).parent, Path(torch_sim.__file__).parent]

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
    "_scaled_dot_product_flash_attention_for_cpu": "the CPU's kernel of the aten operator of that name, which sim's "
                                                   "kernel implements and PrivateUse1's attention hook runs",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "the CPU's kernel of the aten operator of that name, "
                                                            "which sim's kernel implements",
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


# A private name of torch, by the dotted prefix that reaches it, and why nothing public does the same.
NO_PUBLIC_EQUIVALENT = {
    "torch._C._dispatch_": "the dispatcher's own introspection, the explorer's subject; only pu1_explorer.dispatcher "
                           "calls it (tests/explorer/test_import_boundary.py)",
    "torch._register_device_module": "how a PrivateUse1 backend becomes torch.<name>, as PyTorch's reference backend does",
    "torch._utils.get_tensor_metadata": "PyTorch's serialization hook for a backend's tensor metadata",
    "torch._utils.set_tensor_metadata": "PyTorch's serialization hook for a backend's tensor metadata",
    "torch._dynamo.device_interface": "where torch.compile learns a new device (register_interface_for_device)",
    "torch._inductor": "where inductor learns a new device's code generation (register_backend_for_device)",
    "torch.testing._internal": "PyTorch's own device-generic tests and OpInfo database, which the scorecard runs",
    "torch.utils._pytree": "flattens OpInfo's sample inputs as PyTorch's own tests do",
    "OpOverload._schema": "an operator's schema: torch.ops gives it by no other name",
}


def private_torch_names(source: str) -> set[str]:
    """Dotted names in `source` that reach a private member of torch, of Python's sys (`sys._getframe`), or an
    operator's `_schema`."""
    found = set()
    tree = ast.parse(source)
    inner_chains = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "_schema":
            found.add("OpOverload._schema")
        if isinstance(node, ast.Attribute) and id(node) not in inner_chains:
            parts = []
            inner = node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in ("torch", "sys"):
                dotted = [inner.id] + parts[::-1]
                if dotted[:2] == ["torch", "ops"]:  # operator names (aten::_softmax) are not Python members
                    continue
                private = [index for index, part in enumerate(dotted) if part.startswith("_")
                           and not part.startswith("__")]
                if private:
                    found.add(".".join(dotted[:private[-1] + 2]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("torch", "sys"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")[1:]):
                    found.add(dotted)
    return found


def unlisted(names: set[str]) -> set[str]:
    return {name for name in names if not any(name.startswith(prefix) for prefix in NO_PUBLIC_EQUIVALENT)}


def test_the_check_finds_private_members_however_they_are_named():
    source = ("import sys, torch\nfrom torch._C import _get_privateuse1_backend_name\n"
              "torch._C._get_privateuse1_backend_name()\nsys._getframe(1)\ntorch.ops.aten._softmax.default\n"
              "torch.device('privateuseone').type\ntorch._C._dispatch_keys(x)\ntorch.ops.aten.mm.default._schema\n")
    assert private_torch_names(source) == {"torch._C._get_privateuse1_backend_name", "sys._getframe",
                                           "torch._C._dispatch_keys", "OpOverload._schema"}
    assert unlisted(private_torch_names(source)) == {"torch._C._get_privateuse1_backend_name", "sys._getframe"}


def test_the_explorer_and_sim_call_no_private_member_that_has_a_public_equivalent():
    files = [path for package in PYTHON_PACKAGES for path in sorted(package.rglob("*.py"))]
    assert PYTHON_PACKAGES[0] / "fallback_report.py" in files and PYTHON_PACKAGES[1] / "device_module.py" in files
    offenders = {f"{path.parent.name}/{path.name}": sorted(names) for path in files
                 if (names := unlisted(private_torch_names(path.read_text())))}
    assert offenders == {}, "use the public form of these, or list the member with the reason it has none"


TESTS = Path(__file__).resolve().parents[1]

# What the tests name beyond NO_PUBLIC_EQUIVALENT, and why nothing public does the same.
TESTS_NO_PUBLIC_EQUIVALENT = {
    "torch._C._AutoDispatchBelowAutograd": "the dispatcher's state below autograd, whose key set the explorer's "
                                           "picture of it is checked against",
    "torch._C._acc": "PyTorch's own C++ test accelerator, a second backend the explorer and sim are checked beside",
    "torch._dynamo.utils.counters": "torch.compile's count of graphs and graph breaks, what a compile test reads",
    "torch._dynamo.lookup_backend": "the object registered under a torch.compile backend's name "
                                    "(torch.compiler.list_backends gives only the names)",
    "torch.utils._python_dispatch.TorchDispatchMode": "the base class of a dispatch mode, the dispatcher's Python "
                                                      "key that test_keyset draws; torch exports it nowhere else",
    "torch.sim.": "sim's own modules (this project's, not torch's), such as its GPU trace hooks, named as CUDA's are",
}


def is_operator_binding(name: str) -> bool:
    """`torch._foreach_add_`: the Python binding of an ATen operator whose name torch gives an underscore, the
    operator a test calls, not a private member."""
    parts = name.split(".")
    return len(parts) == 2 and hasattr(torch.ops.aten, parts[1])


def test_the_tests_call_no_private_member_that_has_a_public_equivalent():
    files = sorted(TESTS.rglob("*.py"))
    assert TESTS / "explorer" / "test_keyset.py" in files and TESTS / "backend" / "test_compile.py" in files
    offenders = {}
    for path in files:
        names = {name for name in unlisted(private_torch_names(path.read_text()))
                 if not is_operator_binding(name)
                 and not any(name.startswith(prefix) for prefix in TESTS_NO_PUBLIC_EQUIVALENT)}
        if names:
            offenders[str(path.relative_to(TESTS))] = sorted(names)
    assert offenders == {}, "use the public form of these, or list the member with the reason it has none"


def test_an_operators_binding_is_told_apart_from_a_private_member():
    assert is_operator_binding("torch._foreach_add_") and is_operator_binding("torch._assert_async")
    assert not is_operator_binding("torch._register_device_module")
    assert not is_operator_binding("torch._C._dispatch_keys")


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
