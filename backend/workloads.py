"""The reference models, shared with the explorer: `torch_sim.workloads` is `pu1_explorer.workloads`."""
from pu1_explorer.workloads import WORKLOADS, SmallTransformer, Workload, small_cnn, small_mlp, train

__all__ = ["WORKLOADS", "SmallTransformer", "Workload", "small_cnn", "small_mlp", "train"]
