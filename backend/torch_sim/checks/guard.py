import torch

torch.accelerator.set_device_index(1)
print("current device:", torch.accelerator.current_device_index())
