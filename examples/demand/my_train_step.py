"""A workload of your own for `pu1-explorer next-kernels --workload`:
one training step of your model.

The explorer runs this file with the device's name in the global
`device` and counts the operators it reaches.
"""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(16, 32), nn.PReLU(), nn.LayerNorm(32),
                      nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
series = torch.randn(8, 24, 16).to(device)
target = torch.randn(8, 24, 1).to(device)
prediction = model(series).cumsum(dim=1)  # running totals over time
loss = nn.functional.smooth_l1_loss(prediction, target)
loss.backward()
optimizer.step()
print(f"loss {loss.item():.4f} on {device}")
