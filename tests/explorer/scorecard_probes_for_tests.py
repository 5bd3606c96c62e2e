"""Probes that misbehave on purpose, for the scorecard's tests: each is `probe(device, imports)` as the real ones.

They are run by path (`"<this file>:segfault"`); `PU1_TEST_PID_FILE` names the file where a sleeping probe
writes the pid of its own child process.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import torch

from pu1_explorer.conformance.harness import skip

PATH = os.path.abspath(__file__)


def target(name: str) -> str:
    """The probe reference of the function `name` of this file."""
    return f"{PATH}:{name}"


def segfault(device, imports):
    os.kill(os.getpid(), signal.SIGSEGV)


def sleeps(device, imports):
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["PU1_TEST_PID_FILE"], "w") as file:
        file.write(str(child.pid))
    time.sleep(600)


def waits(device, imports):
    while not os.path.exists(os.environ["PU1_TEST_PID_FILE"]):
        time.sleep(0.1)
    skip("the other probe is asleep")


def fails(device, imports):
    assert torch.ones(2, device=device).sum().item() == 3, "two ones do not sum to 3"


def fails_silently(device, imports):
    x = 1
    assert x == 2


def skips(device, imports):
    skip("nothing to check here")


def exits(device, imports):
    os._exit(3)
