import torch
from torch.profiler import ProfilerActivity, profile

a = torch.randn(256, 256, device="sim")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    a @ a
kernels = [event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.PrivateUse1]
if not kernels:
    raise RuntimeError(
        "torch.profiler raised nothing and recorded no PrivateUse1 activity: with no activity profiler "
        "registered for PrivateUse1, kineto leaves the device's kernels out of the trace silently")
mm = next(row for row in prof.key_averages() if row.key == "aten::mm")
print("sim kernels:", kernels, f"| aten::mm: {mm.device_time_total:.0f} us on sim")
