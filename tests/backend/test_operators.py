"""Step 5: the minimal operator set, native kernels and zero-copy host computation."""
import pytest
import torch

from torch_sim.operators import MINIMAL_OPERATORS, NATIVE_OPERATORS


@pytest.mark.parametrize("operator", MINIMAL_OPERATORS + ("convolution_overrideable",
                                                          "convolution_backward_overrideable"))
def test_minimal_and_explicit_operators_have_sim_kernels(operator):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{operator}", "PrivateUse1")


def test_every_native_operator_is_registered():
    missing = [name for name in NATIVE_OPERATORS
               if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1")]
    assert missing == []


def test_empty_strided_view_as_strided_and_item():
    x = torch.empty_strided((2, 3), (1, 2), device="sim")
    assert x.stride() == (1, 2)
    y = torch.arange(6.0, device="sim").view(2, 3)
    assert y.as_strided((3,), (2,), 1).cpu().tolist() == [1.0, 3.0, 5.0]
    assert y[1, 2].item() == 5.0


def test_resize_grows_and_keeps_the_data():
    x = torch.arange(4.0, device="sim")
    x.resize_(10)
    assert x.shape == (10,)
    assert x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_set_shares_storage():
    source = torch.arange(6.0, device="sim")
    target = torch.empty(0, device="sim")
    target.set_(source.untyped_storage(), 2, (2, 2), (2, 1))
    assert target.cpu().tolist() == [[2.0, 3.0], [4.0, 5.0]]
    target.add_(10)
    assert source.cpu().tolist() == [0.0, 1.0, 12.0, 13.0, 14.0, 15.0]
    other = torch.empty(0, device="sim").set_(source)
    assert other.data_ptr() == source.data_ptr()


def test_in_place_ops_write_device_memory_without_moving_it():
    x = torch.zeros(5, device="sim")
    pointer = x.data_ptr()
    x.add_(1).mul_(3)
    torch.special.erfcx(x, out=x)  # reaches the fallback, out= into x
    assert x.data_ptr() == pointer
    torch.testing.assert_close(x.cpu(), torch.special.erfcx(torch.full((5,), 3.0)), rtol=0, atol=0)


def test_views_of_views_share_device_memory():
    x = torch.arange(12.0, device="sim").view(3, 4)
    column = x.t()[1]
    column.fill_(-1)
    assert x[:, 1].cpu().tolist() == [-1.0, -1.0, -1.0]


def test_out_arguments_are_resized_on_the_device():
    out = torch.empty(0, device="sim")
    torch.atan2(torch.ones(3, device="sim"), torch.ones(3, device="sim"), out=out)
    assert out.shape == (3,) and out.device.type == "sim"
    torch.testing.assert_close(out.cpu(), torch.atan2(torch.ones(3), torch.ones(3)), rtol=0, atol=0)


@pytest.mark.usefixtures("settled_memory")
def test_fresh_outputs_are_allocated_on_the_device():
    x = torch.randn(256, device="sim:1")
    before = torch.sim.memory_allocated(1)
    y = torch.special.erfcx(x)
    assert y.device == torch.device("sim:1")
    assert torch.sim.memory_allocated(1) >= before + 1024


def test_conv2d_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1, groups=1)
    x_sim = x.detach().sim().requires_grad_()
    conv_sim = torch.nn.Conv2d(3, 4, 3, padding=1).sim()
    conv_sim.load_state_dict(conv.state_dict())
    conv(x).square().sum().backward()
    conv_sim(x_sim).square().sum().backward()
    torch.testing.assert_close(x_sim.grad.cpu(), x.grad, rtol=0, atol=0)
    torch.testing.assert_close(conv_sim.weight.grad.cpu(), conv.weight.grad, rtol=0, atol=0)
    torch.testing.assert_close(conv_sim.bias.grad.cpu(), conv.bias.grad, rtol=0, atol=0)


def test_dtypes_round_trip():
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool, torch.complex64):
        host = torch.arange(6).to(dtype)
        assert torch.equal(host.to("sim").cpu(), host)


def test_conjugate_views_are_respected():
    z = torch.tensor([1 + 2j, 3 - 1j], device="sim")
    assert torch.equal((z.conj() * 1).cpu(), torch.tensor([1 - 2j, 3 + 1j]))


def test_sparse_tensors_are_refused_clearly():
    with pytest.raises(NotImplementedError, match=r"sim supports strided \(dense\) tensors only, got layout Sparse"):
        torch.empty(2, 2, device="sim", layout=torch.sparse_coo)


def lu_solve_operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LU factors, pivots and a right-hand side whose solve from the right the CPU returns conjugated."""
    torch.manual_seed(0)
    matrix = torch.randn(3, 3, dtype=torch.complex64)
    rhs = torch.randn(1, 3, dtype=torch.complex64)
    lu, pivots = torch.linalg.lu_factor(matrix)
    return lu, pivots, rhs


def test_out_arguments_keep_a_conjugate_bit_the_kernel_sets():
    lu, pivots, rhs = lu_solve_operands()
    expected = torch.linalg.lu_solve(lu, pivots, rhs, left=False)
    got = torch.linalg.lu_solve(lu.to("sim"), pivots.to("sim"), rhs.to("sim"), left=False)
    assert expected.is_conj() and got.is_conj()  # the CPU kernel hands back a conjugated view; sim's keeps the bit
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_an_out_argument_takes_the_conjugate_bit_the_kernel_sets_on_it():
    lu, pivots, rhs = lu_solve_operands()
    expected, out = torch.empty(0, dtype=torch.complex64), torch.empty(0, dtype=torch.complex64, device="sim")
    torch.linalg.lu_solve(lu, pivots, rhs, left=False, out=expected)
    torch.linalg.lu_solve(lu.to("sim"), pivots.to("sim"), rhs.to("sim"), left=False, out=out)
    assert expected.is_conj() and out.is_conj()  # the CPU kernel sets the bit on its out= tensor; sim's carries it
    assert out.device == torch.device("sim:0") and out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


def test_mode_with_out_arguments():
    x = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]])
    values, indices = torch.empty(0, device="sim"), torch.empty(0, dtype=torch.long, device="sim")
    torch.mode(x.to("sim"), 1, out=(values, indices))
    expected = torch.mode(x, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)


def test_every_operator_with_its_own_cpu_kernel_reaches_it_on_sim():
    from torch_sim.operators import host_kernels_over_composites

    # After bring-up nothing is left: each such operator has a sim kernel, so sim takes the CPU's path.
    assert host_kernels_over_composites() == []
    for name in ("addr", "native_group_norm", "mish_backward", "native_channel_shuffle"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name


@pytest.mark.parametrize("case", ["addr", "group_norm", "mish", "channel_shuffle"])
def test_operators_with_a_cpu_kernel_of_their_own_are_bit_identical(case):
    functional = torch.nn.functional
    torch.manual_seed(0)
    functions = {
        "addr": (lambda m, a, b: torch.addr(m, a, b, beta=0.5, alpha=2.0),
                 (torch.randn(5, 7), torch.randn(5), torch.randn(7))),
        "group_norm": (lambda x, w, b: functional.group_norm(x, 3, w, b),
                       (torch.randn(4, 6, 5, 5), torch.randn(6), torch.randn(6))),
        "mish": (functional.mish, (torch.randn(1000),)),
        "channel_shuffle": (lambda x: functional.channel_shuffle(x, 2), (torch.randn(2, 4, 3, 3),)),
    }
    function, inputs = functions[case]
    cpu_inputs = [t.clone().requires_grad_() for t in inputs]
    sim_inputs = [t.to("sim").requires_grad_() for t in inputs]
    cpu_out, sim_out = function(*cpu_inputs), function(*sim_inputs)
    assert torch.equal(sim_out.detach().cpu(), cpu_out.detach())
    grad = torch.randn_like(cpu_out)
    cpu_out.backward(grad)
    sim_out.backward(grad.to("sim"))
    for cpu_input, sim_input in zip(cpu_inputs, sim_inputs):
        assert torch.equal(sim_input.grad.cpu(), cpu_input.grad)


# Many: more tensors than a call's host aliases look up by scanning, so that an index finds the repeated one.
@pytest.mark.parametrize("others", [1, 12], ids=["few_tensors", "many_tensors"])
def test_cat_refuses_an_out_that_is_one_of_its_inputs_as_the_cpu_does(others):
    """An empty tensor overlaps only itself: sim's kernel must see the out= tensor and the input as one tensor."""
    for device in ("cpu", "sim"):
        empty, fulls = torch.zeros(0, device=device), [torch.randn(4, 6, device=device) for _ in range(others)]
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            torch.cat((*fulls, empty), dim=0, out=empty)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            torch.cat((*fulls, empty), dim=0, out=fulls[0])
