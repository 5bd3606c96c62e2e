import torch
from torch.profiler import ProfilerActivity, profile

a = torch.randn(256, 256, device="sim")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    a @ a
kernels = [event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.PrivateUse1]
if not kernels:
    raise RuntimeError("the profiler recorded no sim activity: no activity profiler is registered for sim")
mm = next(row for row in prof.key_averages() if row.key == "aten::mm")
print("sim kernels:", kernels, f"| aten::mm: {mm.device_time_total:.0f} us on sim")
