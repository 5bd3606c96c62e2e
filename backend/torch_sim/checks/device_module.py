import torch

print("torch.sim is", torch.sim.__name__, "and the backend is named", torch._C._get_privateuse1_backend_name())
