import torch

baseline = torch.accelerator.memory_allocated(1)
storage = torch.UntypedStorage(1024, device="sim:1")
print("allocated on sim:1:", torch.accelerator.memory_allocated(1) - baseline, "bytes")
