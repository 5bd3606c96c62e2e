import torch

print("is_available:", torch.sim.is_available(), "| devices:", torch.sim.device_count())
print("accelerator:", torch.accelerator.current_accelerator(), "| pinned:", torch.ones(2).pin_memory().is_pinned())
