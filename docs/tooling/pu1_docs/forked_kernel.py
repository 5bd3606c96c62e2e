"""Jupyter kernels forked from a template that has already imported torch, ipykernel, plotly and the widgets.

A fresh kernel spends about 2.5 s starting Python and importing torch before a notebook's first cell runs; the docs
build starts one per notebook. The kernel spec `pu1-forked-python` (in `kernels/`) names the kernel provisioner
`ForkedKernelProvisioner` (entry point `pu1-forked` of jupyter_client's `jupyter_client.kernel_provisioners` group),
which forks each IPython kernel from the explorer's fork server instead of launching a new interpreter. The notebook
still runs in a process of its own, with its own environment, and backends load as `import torch` loads them. The
kernel is told of its template (`PU1_FORK_SERVER`), so the fresh processes it starts in turn (the guide's checks, the
scorecard's probes) fork from it too. nbclient gets `NotebookClient(kernel_name=KERNEL_NAME,
kernel_manager_class=ForkedKernelManager)`.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Type, Unicode, default
from traitlets.config import Config

from pu1_explorer.forkserver import ADVERTISED, fork_server

KERNEL_NAME = "pu1-forked-python"
KERNELS = Path(__file__).resolve().parent / "kernels"
# not ipykernel.kernelapp itself: its options read their defaults from the environment when it is imported
# (ipykernel.debugger: every kernel imports debugpy as it starts, half its start-up)
PRELOAD = ("ipykernel.ipkernel", "ipykernel.debugger", "plotly.graph_objects", "pu1_explorer.widgets",
           "torch.distributed.tensor", "torch._inductor.compile_fx")


class ForkedKernelProvisioner(LocalProvisioner):
    """Launches `python -m ipykernel_launcher ...` as a child forked from a template; any other command as usual."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Fork the kernel from the template that suits its environment (started on first use)."""
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


WAIT_SLICE = 0.25  # seconds: the longest a message whose arrival pyzmq's asyncio wait missed stays unread


class RecheckingChannel(AsyncZMQSocketChannel):
    """A kernel channel that waits for a message in slices, each ending with a direct check of the socket.

    pyzmq's asyncio wait can miss a message's arrival: in the docs build, a cell's reply sat unread in the socket until
    the cell's time limit (300 s) ran out and that limit's final check found it."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message, or `queue.Empty` after `timeout` seconds (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = WAIT_SLICE if left is None else min(WAIT_SLICE, left)
            if await self.socket.poll(int(wait * 1000)):
                _, message = self.session.feed_identities(await self.socket.recv_multipart())
                return self.session.deserialize(message)
            if left is not None and left <= wait:
                raise Empty


class RecheckingKernelClient(AsyncKernelClient):
    """An `AsyncKernelClient` whose channels never leave a message unread for longer than `WAIT_SLICE`."""

    shell_channel_class = Type(RecheckingChannel)
    iopub_channel_class = Type(RecheckingChannel)
    stdin_channel_class = Type(RecheckingChannel)
    control_channel_class = Type(RecheckingChannel)


class ForkedKernelManager(AsyncKernelManager):
    """An `AsyncKernelManager` that finds the kernel spec `KERNEL_NAME` (whose kernel is forked from a template) and
    whose client rechecks its sockets."""

    kernel_name = Unicode(KERNEL_NAME)
    client_factory = Type(RecheckingKernelClient, klass=AsyncKernelClient, config=True)

    @default("kernel_spec_manager")
    def _kernel_specs_with_the_forked_kernel(self) -> KernelSpecManager:
        return KernelSpecManager(kernel_dirs=[str(KERNELS)])


class LaunchedKernelManager(AsyncKernelManager):
    """An `AsyncKernelManager` of the kernel JupyterLab launches (`python3`, a new interpreter) whose client rechecks
    its sockets: the notebook tests' kernel."""

    kernel_name = Unicode("python3")
    client_factory = Type(RecheckingKernelClient, klass=AsyncKernelClient, config=True)


@contextlib.contextmanager
def local_sockets() -> Iterator[Config]:
    """A Jupyter client configuration whose kernel talks over local (IPC) sockets, not TCP, in a temporary folder of
    its own that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="pu1-kernel-") as folder:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(folder, "kernel")
        yield config
