"""Host code reading a sim tensor's bytes at its address, as a vendor kernel written as host code would:
`python -m tests.backend.host_reads_device_memory`. Prints the address, then the four bytes read there."""
import ctypes

import torch

tensor = torch.arange(4.0, device="sim") + 1  # written by a kernel of sim
torch.sim.synchronize()  # the kernel has run: host code now reads its result in place
print(f"{tensor.data_ptr():#x}", flush=True)
print(ctypes.string_at(tensor.data_ptr(), 4), flush=True)
