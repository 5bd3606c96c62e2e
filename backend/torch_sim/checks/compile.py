import torch
from torch._inductor import metrics


def scale_and_relu(x):
    return (x * 2).relu() + 1


x = torch.randn(64, device="sim")
result = torch.compile(scale_and_relu)(x)
same = torch.equal(result.cpu(), scale_and_relu(x).cpu())
print("compiled on", result.device, "| kernels inductor wrote:", metrics.generated_kernel_count, "| equal to eager:", same)
