import io

import torch

weights = torch.arange(3.0, device="sim:1")
torch._utils.set_tensor_metadata(weights, {"tiled": True})
buffer = io.BytesIO()
torch.save(weights, buffer)
buffer.seek(0)
loaded = torch.load(buffer)
print("loaded back:", loaded, "| backend metadata:", torch._utils.get_tensor_metadata(loaded))
if not torch._utils.get_tensor_metadata(loaded).get("tiled"):
    raise RuntimeError(
        "torch.load returned the tensor without its backend metadata {'tiled': True}: PyTorch raises nothing here, "
        "it drops a device's metadata silently when no serialization functions are registered for PrivateUse1")
storage = torch.UntypedStorage(8).sim(1)
print("a host storage moved to", storage.device, "| is_sim:", storage.is_sim)
