"""Step 10: save/load, map_location, pickling, deepcopy and storages, all bit-identical."""
import copy
import io
import pickle

import torch


def save_and_load(value, **load_arguments):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_arguments)


def test_tensors_round_trip_on_their_device():
    x = torch.randn(3, 4, device="sim:1")
    loaded = save_and_load(x)
    assert loaded.device == torch.device("sim:1")
    assert torch.equal(loaded.cpu(), x.cpu())


def test_views_keep_sharing_storage():
    base = torch.arange(10.0, device="sim")
    loaded_base, loaded_view = save_and_load([base, base[2:5]])
    loaded_view.fill_(-1)
    assert loaded_base[2:5].cpu().tolist() == [-1.0, -1.0, -1.0]


def test_state_dict_with_map_location():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).sim()
    state = model.state_dict()
    on_cpu = save_and_load(state, map_location="cpu")
    on_one = save_and_load(state, map_location="sim:1")
    for key, value in state.items():
        assert on_cpu[key].device.type == "cpu"
        assert on_one[key].device == torch.device("sim:1")
        assert torch.equal(on_cpu[key], value.cpu()) and torch.equal(on_one[key].cpu(), value.cpu())
    restored = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    restored.load_state_dict(on_cpu)


def test_cpu_checkpoint_maps_onto_sim():
    x = torch.randn(5)
    loaded = save_and_load(x, map_location="sim:1")
    assert loaded.device == torch.device("sim:1") and torch.equal(loaded.cpu(), x)


def test_deepcopy_and_pickle():
    x = torch.randn(6, device="sim:1", dtype=torch.float64)
    copied = copy.deepcopy(x)
    assert copied.device == x.device and copied.data_ptr() != x.data_ptr()
    assert torch.equal(copied.cpu(), x.cpu())
    unpickled = pickle.loads(pickle.dumps(x))
    assert unpickled.device == x.device and torch.equal(unpickled.cpu(), x.cpu())
    model = copy.deepcopy(torch.nn.Linear(3, 3).sim())
    assert model.weight.device.type == "sim"


def test_storages_move_between_host_and_device():
    x = torch.arange(4, dtype=torch.int32, device="sim")
    host_storage = x.untyped_storage().cpu()
    assert bytes(host_storage) == bytes(torch.arange(4, dtype=torch.int32).untyped_storage())
    back = host_storage.sim(1)
    assert back.is_sim and back.device == torch.device("sim:1")
    assert bytes(back.cpu()) == bytes(host_storage)


def test_backend_metadata_is_kept_read_back_and_saved():
    x = torch.randn(4, device="sim:1")
    torch._utils.set_tensor_metadata(x, {"compressed": True, "tiled": False})
    assert torch._utils.get_tensor_metadata(x) == {"compressed": True, "tiled": False}
    loaded = save_and_load(x)
    assert loaded.device == torch.device("sim:1")
    assert torch._utils.get_tensor_metadata(loaded) == {"compressed": True, "tiled": False}
    assert torch.equal(loaded.cpu(), x.cpu())


def test_backend_metadata_is_per_tensor():
    x = torch.randn(4, device="sim")
    torch._utils.set_tensor_metadata(x, {"compressed": True})
    copy_ = x.detach()
    torch._utils.set_tensor_metadata(copy_, {"compressed": False})
    assert torch._utils.get_tensor_metadata(x) == {"compressed": True}
    assert torch._utils.get_tensor_metadata(copy_) == {"compressed": False}
    assert torch._utils.get_tensor_metadata(torch.randn(4, device="sim")) == {}


def test_backend_metadata_goes_with_the_conjugate_bit():
    z = torch.randn(3, dtype=torch.complex64, device="sim").conj()
    torch._utils.set_tensor_metadata(z, {"tiled": True})
    loaded = save_and_load(z)
    assert loaded.is_conj() and torch._utils.get_tensor_metadata(loaded) == {"conj": True, "tiled": True}
    assert torch.equal(loaded.resolve_conj().cpu(), z.resolve_conj().cpu())
