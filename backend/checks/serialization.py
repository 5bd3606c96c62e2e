import io

import torch

buffer = io.BytesIO()
torch.save({"weights": torch.arange(3.0, device="sim:1")}, buffer)
buffer.seek(0)
print("loaded back:", torch.load(buffer)["weights"])
storage = torch.UntypedStorage(8).sim(1)
print("a host storage moved to", storage.device, "| is_sim:", storage.is_sim)
