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
    torch.testing.assert_close(x.cpu(), torch.special.erfcx(torch.full((5,), 3.0)))


def test_views_of_views_share_device_memory():
    x = torch.arange(12.0, device="sim").view(3, 4)
    column = x.t()[1]
    column.fill_(-1)
    assert x[:, 1].cpu().tolist() == [-1.0, -1.0, -1.0]


def test_out_arguments_are_resized_on_the_device():
    out = torch.empty(0, device="sim")
    torch.atan2(torch.ones(3, device="sim"), torch.ones(3, device="sim"), out=out)
    assert out.shape == (3,) and out.device.type == "sim"
    torch.testing.assert_close(out.cpu(), torch.full((3,), torch.pi / 4))


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
    torch.testing.assert_close(x_sim.grad.cpu(), x.grad)
    torch.testing.assert_close(conv_sim.weight.grad.cpu(), conv.weight.grad)
    torch.testing.assert_close(conv_sim.bias.grad.cpu(), conv.bias.grad)


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


def test_out_arguments_keep_a_conjugate_bit_the_kernel_sets():
    torch.manual_seed(0)
    matrix = torch.randn(3, 3, dtype=torch.complex64)
    rhs = torch.randn(1, 3, dtype=torch.complex64)
    lu, pivots = torch.linalg.lu_factor(matrix)
    expected = torch.linalg.lu_solve(lu, pivots, rhs, left=False)
    got = torch.linalg.lu_solve(lu.to("sim"), pivots.to("sim"), rhs.to("sim"), left=False)
    torch.testing.assert_close(got.cpu(), expected)


def test_mode_with_out_arguments():
    x = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]])
    values, indices = torch.empty(0, device="sim"), torch.empty(0, dtype=torch.long, device="sim")
    torch.mode(x.to("sim"), 1, out=(values, indices))
    expected = torch.mode(x, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)
