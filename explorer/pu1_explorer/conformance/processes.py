"""The parent's side of a child process: start `python -m <child> CONFIG` forked from a template that has
imported torch (`pu1_explorer.forkserver`), read its messages, and kill its whole process group when it
outlives its time or the scorecard is interrupted.
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from pu1_explorer.conformance.harness import parse_message
from pu1_explorer.forkserver import fork_server, signal_name

# What the templates import besides torch, so that each child does not: the first torch.testing.assert_close
# imports torch.distributed.tensor (0.6 s). Not the OpInfo database: it must see the functions as the
# backend's imports leave them (a backend may replace some).
PRELOAD = ("torch.distributed.tensor",)
LOG_TAIL = 4000  # characters of a child's standard error kept


@dataclass
class Run:
    """What one child process did: its exit code (negative: the signal), messages, the tail of its stderr."""

    returncode: int | None
    timed_out: bool
    messages: list[dict]
    log: str
    seconds: float


class Cancelled(Exception):
    """The scorecard was interrupted: no new process starts, running ones are killed."""


def child_environment(env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment with `env` on top, and the fault handler on (a crash leaves its stack)."""
    environment = dict(os.environ)
    environment.update(env or {})
    environment.setdefault("PYTHONFAULTHANDLER", "1")
    return environment


def child_argv(module: str, config: dict) -> list[str]:
    """The command line of a child program: `-m pu1_explorer.conformance.<module> CONFIG`."""
    return ["-m", f"pu1_explorer.conformance.{module}", json.dumps(config)]


def run_program(argv: Sequence[str], env: dict[str, str], timeout: float, renew_on: str | None = None,
                stop: threading.Event | None = None) -> Run:
    """Run `python *argv` in a fresh process group (forked from the template of `env`); kill the group when it
    outlives `timeout` (renewed by each message of kind `renew_on`) or when `stop` is set (then raise Cancelled)."""
    if stop is not None and stop.is_set():
        raise Cancelled()
    started = time.perf_counter()
    messages: list[dict] = []
    with tempfile.TemporaryFile("w+b") as errors:
        output, child_output = os.pipe()
        try:
            process = fork_server(env, PRELOAD).start(argv, child_output, errors.fileno())
        finally:
            os.close(child_output)
        stdout = os.fdopen(output, "rb", buffering=0)
        deadline = time.monotonic() + timeout
        buffer = b""
        timed_out = False
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while True:
                if stop is not None and stop.is_set():
                    process.kill_group()
                    raise Cancelled()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if not selector.select(timeout=min(remaining, 0.5)):
                    continue
                chunk = os.read(output, 65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    message = parse_message(line.decode("utf-8", "replace"))
                    if message is not None:
                        messages.append(message)
                        if renew_on and message.get("kind") == renew_on:
                            deadline = time.monotonic() + timeout
        if timed_out:
            process.kill_group()
        try:
            returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill_group()
            returncode = process.wait()
        stdout.close()
        errors.seek(0)
        log = errors.read()[-LOG_TAIL:].decode("utf-8", "replace")
    return Run(returncode, timed_out, messages, log, time.perf_counter() - started)


def ending(run: Run, timeout: float) -> tuple[str, str]:
    """How a process that did not finish its work ended: ("timed out" or "crashed", why)."""
    if run.timed_out:
        return "timed out", f"killed after {timeout:g} s"
    if run.returncode is not None and run.returncode < 0:
        return "crashed", f"the process died of {signal_name(run.returncode)}"
    return "crashed", f"the process exited with code {run.returncode}"
