"""Jupyter kernels forked from a template that has already imported torch, ipykernel, plotly and the widgets.

A fresh kernel spends about 2.5 s starting Python and importing torch before a notebook's first cell
runs; the docs build starts one per notebook. `ForkedKernelManager` (nbclient's `kernel_manager_class`)
forks each IPython kernel from a `ForkServer` instead, so the notebook still runs in a process of its
own, with its own environment and backends loaded as `import torch` would load them. The kernel is told of
its template (`PU1_FORK_SERVER`), so the fresh processes it starts in turn (the guide's checks, the
scorecard's probes) fork from it too, instead of starting a template of their own.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from queue import Empty
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Type
from traitlets.config import Config

from pu1_explorer.forkserver import ADVERTISED, fork_server

# not ipykernel.kernelapp itself: its options read their defaults from the environment when it is imported
# (ipykernel.debugger: every kernel imports debugpy as it starts, half its start-up)
PRELOAD = ("ipykernel.ipkernel", "ipykernel.debugger", "plotly.graph_objects", "pu1_explorer.widgets",
           "torch.distributed.tensor", "torch._inductor.compile_fx")


class ForkedKernelProvisioner(LocalProvisioner):
    """Launches `python -m ipykernel_launcher ...` as a forked child; any other kernel command as usual."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        if cmd[:3] != [sys.executable, "-m", "ipykernel_launcher"]:
            return await super().launch_kernel(cmd, **kwargs)
        env = dict(kwargs.get("env") or os.environ, JPY_PARENT_PID=str(os.getpid()))
        # the JPY_* variables differ per kernel and are read only once the kernel runs
        template_env = {name: value for name, value in env.items() if not name.startswith("JPY_")}
        server = fork_server(template_env, PRELOAD)
        env[ADVERTISED] = server.advertisement()  # the kernel's own fresh processes fork from the same template
        self.process = server.start(cmd[1:], sys.stdout.fileno(), sys.stderr.fileno(), cwd=kwargs.get("cwd"), env=env)
        self.pid = self.pgid = self.process.pid  # the child calls setsid: its group is its own
        self.cwd = kwargs.get("cwd") or os.getcwd()
        return self.connection_info


WAIT_SLICE = 0.25  # seconds: the longest a message that pyzmq's asyncio wait missed stays unread


class RecheckingChannel(AsyncZMQSocketChannel):
    """A kernel channel that waits for a message in slices, each ending with a direct check of the socket.

    pyzmq's asyncio wait can miss a message's arrival: in the docs build, a cell's reply sat unread in the socket
    until the cell's time limit (300 s) ran out and that limit's final check found it."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = WAIT_SLICE if left is None else min(WAIT_SLICE, left)
            if await self.socket.poll(int(wait * 1000)):
                return await self._recv()
            if left is not None and left <= wait:
                raise Empty


class RecheckingKernelClient(AsyncKernelClient):
    """An `AsyncKernelClient` whose channels never leave a message unread for longer than `WAIT_SLICE`, and that
    knows a new kernel is ready without waiting for silence."""

    shell_channel_class = Type(RecheckingChannel)
    iopub_channel_class = Type(RecheckingChannel)
    stdin_channel_class = Type(RecheckingChannel)
    control_channel_class = Type(RecheckingChannel)

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Ready once the kernel has answered a `kernel_info` request on the shell channel and IOPub is seen to be
        connected. jupyter_client's own wait then reads IOPub until it has been silent for 0.2 s, for every kernel the
        docs build starts."""
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply" and \
                    await self._iopub_connected(reply["parent_header"].get("msg_id"), patience=0.5):
                self._handle_kernel_info_reply(reply)
                return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    _async_wait_for_ready = wait_for_ready

    async def _iopub_connected(self, request: str | None, patience: float) -> bool:
        """Whether IOPub carries the kernel's messages: it welcomed our subscription (ipykernel 7) or reported the
        kernel idle after `request`, within `patience` seconds."""
        deadline = time.monotonic() + patience
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await self.iopub_channel.get_msg(timeout=left)
            except Empty:
                return False
            if message["msg_type"] == "iopub_welcome" or (
                    message["msg_type"] == "status" and message["content"].get("execution_state") == "idle"
                    and message["parent_header"].get("msg_id") == request):
                return True
        return False


class ForkedKernelManager(AsyncKernelManager):
    """An `AsyncKernelManager` whose IPython kernels are forked from a template (see the module's docstring), with a
    client that rechecks its sockets."""

    client_factory = Type(RecheckingKernelClient)

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", None) or str(uuid.uuid4())
            self.provisioner = ForkedKernelProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                                       parent=self)
        return await super()._async_pre_start_kernel(**kw)


@contextlib.contextmanager
def local_sockets() -> Iterator[Config]:
    """A Jupyter client configuration whose kernel talks over local (IPC) sockets, not TCP, in a temporary
    folder of its own that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="pu1-kernel-") as folder:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(folder, "kernel")
        yield config
