import torch

print("is_available:", torch.sim.is_available(), "| devices:", torch.sim.device_count())
print("hooks registered:", torch._C._get_accelerator())
