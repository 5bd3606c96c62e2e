"""Programs with a race between a device's streams, each with its fix, for the stream sanitizer's tests.

Each function returns what the program computed: with the race the answer is wrong when the
slow stream has not finished (it has not, after `device_sleep`), with the fix it is right every time.
Run as a script (`pu1-explorer sanitize`), the file runs the race named by STREAM_RACE, fixed
when STREAM_RACE_FIXED=1.
"""
from __future__ import annotations

import os

import torch

SIZE = 1 << 14
SLOW_MS = 50


def read_while_another_stream_writes(device: str, fixed: bool) -> float:
    """Stream `writer` copies ones into x; stream `reader` reads x: without a wait it reads the zeros."""
    module = torch.get_device_module(device)
    ones = torch.ones(SIZE).pin_memory()
    writer, reader = module.Stream(), module.Stream()
    x = torch.zeros(SIZE, device=device)
    x * 1  # the device's first float multiply: later ones are queued without waiting
    writer.wait_stream(module.current_stream())
    reader.wait_stream(module.current_stream())  # x's zeros are written before the reader reads x: one race only
    with module.stream(writer):
        module.device_sleep(SLOW_MS)
        x.copy_(ones, non_blocking=True)
    if fixed:
        reader.wait_stream(writer)
    with module.stream(reader):
        doubled = x * 2
    module.synchronize()
    return doubled.sum().item()


def reuse_without_record_stream(device: str, fixed: bool) -> float:
    """x is allocated on the current stream and written on `user`; freed without record_stream, its memory goes
    back to the current stream at once, and zeros written there are overwritten by the copy still to come."""
    module = torch.get_device_module(device)
    ones = torch.ones(SIZE).pin_memory()
    user = module.Stream()
    x = torch.zeros(SIZE, device=device)
    user.wait_stream(module.current_stream())
    with module.stream(user):
        module.device_sleep(SLOW_MS)
        x.copy_(ones, non_blocking=True)
    if fixed:
        x.record_stream(user)
    del x
    following = torch.zeros(SIZE, device=device)
    module.synchronize()
    return following.sum().item()


def read_the_result_before_its_stream_finished(device: str, fixed: bool) -> float:
    """A result computed on a side stream is read on the current stream, which did not wait for it."""
    module = torch.get_device_module(device)
    side = module.Stream()
    x = torch.ones(SIZE, device=device)
    side.wait_stream(module.current_stream())
    with module.stream(side):
        module.device_sleep(SLOW_MS)
        result = x * 3
    if fixed:
        module.current_stream().wait_stream(side)
    return result.sum().item()


def backward_reads_a_gradient_another_stream_writes(device: str, fixed: bool) -> float:
    """The gradient handed to backward() is copied in on a side stream; the backward pass, on the current stream,
    reads it without a wait (the race is in an operator of the backward pass, not of the user's code)."""
    module = torch.get_device_module(device)
    warm = torch.ones(SIZE, device=device)  # the first backward pass starts autograd's device thread: not this one
    (warm.requires_grad_() * 2).backward(warm)
    ones = torch.ones(SIZE).pin_memory()
    side = module.Stream()
    weight = torch.ones(SIZE, device=device, requires_grad=True)
    doubled = weight * 2
    gradient = torch.zeros(SIZE, device=device)
    side.wait_stream(module.current_stream())
    with module.stream(side):
        module.device_sleep(SLOW_MS)
        gradient.copy_(ones, non_blocking=True)
    if fixed:
        module.current_stream().wait_stream(side)
    doubled.backward(gradient)
    return weight.grad.sum().item()


RACES = {function.__name__: function for function in (read_while_another_stream_writes, reuse_without_record_stream,
                                                       read_the_result_before_its_stream_finished,
                                                       backward_reads_a_gradient_another_stream_writes)}
RIGHT_ANSWERS = {"read_while_another_stream_writes": 2.0 * SIZE, "reuse_without_record_stream": 0.0,
                 "read_the_result_before_its_stream_finished": 3.0 * SIZE,
                 "backward_reads_a_gradient_another_stream_writes": 2.0 * SIZE}

if __name__ == "__main__":
    name = os.environ.get("STREAM_RACE", "read_while_another_stream_writes")
    answer = RACES[name](globals().get("device", "sim"), fixed=os.environ.get("STREAM_RACE_FIXED") == "1")
    print(f"{name}: {answer}")
