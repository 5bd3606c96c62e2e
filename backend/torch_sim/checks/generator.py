import torch

generator = torch.Generator(device="sim").manual_seed(0)
print(torch.rand(3, device="sim", generator=generator))
