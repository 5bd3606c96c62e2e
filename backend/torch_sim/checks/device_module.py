import torch

print("torch.sim is", torch.sim.__name__, "and the backend is named", torch.device("privateuseone").type)
