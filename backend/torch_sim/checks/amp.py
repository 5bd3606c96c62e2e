import torch

a = torch.randn(4, 4, device="sim")
with torch.autocast("sim", dtype=torch.bfloat16):
    product = a @ a
print("matmul under autocast gives", product.dtype)
