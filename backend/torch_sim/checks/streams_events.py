import torch

stream = torch.Stream(device="sim")
start, end = torch.Event(device="sim", enable_timing=True), torch.Event(device="sim", enable_timing=True)
start.record(stream)
end.record(stream)
end.synchronize()  # elapsed_time() needs both records completed on the device
print("stream", stream.stream_id, "elapsed ms >= 0:", start.elapsed_time(end) >= 0)
