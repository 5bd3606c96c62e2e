import torch

x = torch.ones(4, device="sim")
graph = torch.accelerator.Graph()
with torch.Stream(device="sim"), graph:
    y = x * 2
graph.replay()
print("a replay of x * 2 gave", y.tolist())
