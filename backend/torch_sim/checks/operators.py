import torch

x = torch.arange(6.0, device="sim").reshape(2, 3)
print(x * 2 + 1)
