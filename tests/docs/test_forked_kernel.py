"""The docs build's Jupyter kernels, forked from a template: a notebook runs in a kernel of its own that has torch
imported already, started through jupyter_client's public kernel provisioner interface."""
import importlib.util
import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from pu1_docs.forked_kernel import KERNEL_NAME, ForkedKernelManager, ForkedKernelProvisioner, local_sockets
from tests.explorer.test_scorecard import alive


def _execute(*cells: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    with local_sockets() as config:
        NotebookClient(notebook, timeout=120, kernel_name=KERNEL_NAME, kernel_manager_class=ForkedKernelManager,
                       config=config).execute(
            env=dict(os.environ, SIM_FALLBACK="silent", PU1_MARK="kernel"))
    return notebook


def _printed(cell: nbformat.NotebookNode) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def test_a_notebook_runs_in_a_forked_kernel_with_its_environment_and_backends():
    notebook = _execute("import sys; print('torch' in sys.modules, 'torch_sim' in sys.modules)",
                        "import os, torch\n"
                        "print(os.environ['PU1_MARK'], torch.ones(2, device='sim').device, os.getpid())",
                        "x = 41\nx + 1")
    # torch came from the template before the first cell; sim loaded after the fork, as `import torch` loads it
    assert _printed(notebook.cells[0]).split() == ["True", "True"]
    mark, device, pid = _printed(notebook.cells[1]).split()
    assert (mark, device) == ("kernel", "sim:0")
    assert notebook.cells[2].outputs[0]["data"]["text/plain"] == "42"
    assert int(pid) != os.getpid() and not alive(int(pid))  # its own process, gone after the notebook


def test_the_kernel_spec_selects_the_provisioner_through_its_entry_point():
    from jupyter_client.provisioning import KernelProvisionerFactory

    manager = ForkedKernelManager()
    assert manager.kernel_spec.metadata["kernel_provisioner"]["provisioner_name"] == "pu1-forked"
    provisioner = KernelProvisionerFactory.instance().create_provisioner_instance("x", manager.kernel_spec, manager)
    assert type(provisioner) is ForkedKernelProvisioner
    from pu1_docs.forked_kernel import RecheckingChannel

    client = manager.client()  # the build's kernels are read by channels that recheck their sockets
    assert {client.shell_channel_class, client.iopub_channel_class, client.control_channel_class} == {RecheckingChannel}


def test_the_forked_kernels_are_docs_tooling_not_part_of_the_explorer():
    assert importlib.util.find_spec("pu1_explorer.forked_kernel") is None


def test_a_kernel_that_dies_is_reported_and_leaves_nothing_running(tmp_path):
    pid_file = tmp_path / "kernel.pid"
    with pytest.raises(DeadKernelError):
        _execute(f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))", "os._exit(3)")
    assert not alive(int(pid_file.read_text()))


def record_kernels(monkeypatch) -> list:
    """The processes of the forked kernels launched from now on (their return codes once they end)."""
    kernels = []
    launch = ForkedKernelProvisioner.launch_kernel

    async def recording_launch(self, cmd, **kwargs):
        info = await launch(self, cmd, **kwargs)
        kernels.append(self.process)
        return info

    monkeypatch.setattr(ForkedKernelProvisioner, "launch_kernel", recording_launch)
    return kernels


def test_a_kernel_that_used_the_fork_server_ends_when_asked(monkeypatch):
    # ipykernel, asked to shut down, waits for the processes of its group; a fork server's template must not be
    # one of them, or the kernel waits until it is killed (2.5 s later, with SIGTERM)
    kernels = record_kernels(monkeypatch)
    _execute("import os\nfrom pu1_explorer import forkserver\n"
             "print(forkserver.run(['-c', 'print(6 * 7)'], dict(os.environ), timeout=60).stdout)")
    assert [kernel.returncode for kernel in kernels] == [0]


def test_a_kernels_fresh_processes_fork_from_its_own_template():
    # a guide check and a scorecard probe in the kernel start no template of their own: they use the kernel's
    notebook = _execute("import os\nfrom pu1_explorer import forkserver, guide\n"
                        "from pu1_explorer.conformance import scorecard\n"
                        "import torch_sim\ncheck = guide.check_step(torch_sim.GUIDE, 'operators')\n"
                        "card = scorecard('sim', probes=['operators', 'generator'], opinfo='none', jobs=1)\n"
                        "templates = forkserver.kept_templates()\n"
                        "print(check.demonstrates_the_step, [probe.status for probe in card.probes],\n"
                        "      [server.address == __import__('json').loads(os.environ['PU1_FORK_SERVER'])['address']\n"
                        "       for server in templates], [not server.started_here for server in templates])")
    assert _printed(notebook.cells[0]).split() == ["True", "['passed',", "'passed']", "[True,", "True]",
                                                   "[True,", "True]"]


async def _read_after_its_wake_up_was_consumed(channel_class, patience: float) -> dict:
    """A message sent while a channel waits, whose socket's wake-up is consumed before the event loop sees it (as
    libzmq does when another operation on the socket processes its commands first)."""
    import asyncio

    import zmq
    import zmq.asyncio
    from jupyter_client.session import Session

    context = zmq.asyncio.Context()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.bind("inproc://wake-up"), receiver.connect("inproc://wake-up")
    session = Session()
    try:
        channel = channel_class(receiver, session)
        waiting = asyncio.ensure_future(channel.get_msg(timeout=None))
        await asyncio.sleep(0.1)  # the channel waits on the socket
        session.send(zmq.Socket.shadow(sender.underlying), "execute_reply", {"status": "ok"})
        zmq.Socket.shadow(receiver.underlying).get(zmq.EVENTS)  # consumes the wake-up
        return await asyncio.wait_for(waiting, timeout=patience)
    finally:
        sender.close(linger=0), receiver.close(linger=0)
        context.term()


def test_a_reply_whose_wake_up_was_missed_is_still_read():
    # pyzmq's asyncio wait can miss it (nbclient's time limit was the only way out: a 300 s stall in the docs build);
    # the forked kernels' client finds it at the end of its next wait slice
    import asyncio

    from pu1_docs.forked_kernel import RecheckingChannel

    assert asyncio.run(_read_after_its_wake_up_was_consumed(RecheckingChannel, 30))["msg_type"] == "execute_reply"
