import torch

print(torch.ones(2, device="sim:1"))
