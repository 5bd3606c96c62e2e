import torch
import torch.distributed as dist

dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)  # no backend argument
tensor = torch.arange(3.0, device="sim")
dist.all_reduce(tensor)
print("backend for sim:", dist.get_default_backend_for_device("sim"), "| all_reduce gave", tensor)
dist.destroy_process_group()
