"""Host code reading a sim tensor's bytes at its address, as a vendor kernel written as host code would:
`python -m tests.backend.host_reads_device_memory [--while-the-device-works] [--take-every-protection-key]`.
Prints the tensor as a copy brings it back, the address, then the four bytes read there."""
import argparse
import ctypes
import sys

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--while-the-device-works", action="store_true",
                    help="read while the device still runs queued matrix products")
parser.add_argument("--take-every-protection-key", action="store_true",
                    help="take the process's memory protection keys before sim starts, leaving it none")
arguments = parser.parse_args()

if arguments.take_every_protection_key:
    libc = ctypes.CDLL(None, use_errno=True)
    while libc.pkey_alloc(0, 0) >= 0:
        pass

import torch  # noqa: E402  (after the keys are taken: importing torch loads sim, which starts its driver)

tensor = torch.arange(4.0, device="sim") + 1  # written by a kernel of sim
print("computed on the device:", tensor.cpu().tolist(), flush=True)
torch.sim.synchronize()  # the kernel has run: host code now reads its result in place
if arguments.while_the_device_works:
    matrix = torch.randn(1024, 1024, device="sim")
    products = [matrix @ matrix for _ in range(8)]
    if torch.sim.current_stream().query():
        sys.exit("the device finished its matrix products before the read; queue more of them")
print(f"{tensor.data_ptr():#x}", flush=True)
print(ctypes.string_at(tensor.data_ptr(), 4), flush=True)
