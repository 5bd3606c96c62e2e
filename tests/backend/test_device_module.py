"""Step 1 and 2: torch.sim as the device module, and torch.accelerator answering for sim."""
import ast
import subprocess
import sys

import pytest
import torch


def test_backend_is_renamed_and_registered():
    assert torch.device("privateuseone").type == "sim"
    assert torch.sim.is_available()
    assert torch.sim.device_count() == 2


def test_accelerator_api_answers_for_sim():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("sim")
    assert torch.accelerator.device_count() == torch.sim.device_count()
    torch.accelerator.synchronize()
    torch.sim.synchronize()
    torch.sim.synchronize(1)


def test_generated_tensor_and_module_methods():
    tensor = torch.ones(3).sim()
    assert tensor.is_sim and tensor.device == torch.device("sim:0")
    module = torch.nn.Linear(2, 2).sim(1)
    assert module.weight.device == torch.device("sim:1")


def test_device_names_and_index_helpers():
    assert torch.sim.get_device_name(1) == "Simulated accelerator 1"
    with torch.sim.device(1):
        assert torch.sim.current_device() == 1
    assert torch.sim.current_device() == 0


@pytest.mark.parametrize("device", [2, "sim:7", torch.device("sim", 5)])
def test_device_index_out_of_range_is_a_clear_error(device):
    with pytest.raises(RuntimeError, match="does not exist: this process has 2 sim device"):
        torch.sim.set_device(device)
    assert torch.sim.current_device() == 0


def test_tensor_on_a_missing_device_is_a_clear_error():
    with pytest.raises(RuntimeError, match="sim:9 does not exist"):
        torch.ones(2, device="sim:9")
    assert torch.ones(2, device="sim:1").sum().item() == 2


def test_a_cpu_device_is_refused_by_sim_helpers():
    with pytest.raises(ValueError, match="expected a sim device"):
        torch.sim.memory_allocated("cpu")


FORKED_CHILD = """
import multiprocessing, torch

def child(results):
    try:
        torch.ones(1, device="sim")
        results.put(("started", torch.sim._is_in_bad_fork()))
    except RuntimeError as error:
        results.put((str(error), torch.sim._is_in_bad_fork()))

def run(method):
    context = multiprocessing.get_context(method)
    results = context.Queue()
    process = context.Process(target=child, args=(results,))
    process.start()
    outcome = results.get(timeout=120)
    process.join()
    return outcome

if __name__ == "__main__":
    print(repr(run("fork")))
    torch.ones(1, device="sim")
    print(repr((torch.sim._is_in_bad_fork(), torch.sim.is_initialized())))
    print(repr(run("fork")))
    print(repr(run("spawn")))
"""


def test_a_child_forked_after_sim_started_gets_cudas_bad_fork_error(tmp_path):
    program = tmp_path / "fork_after_start.py"
    program.write_text(FORKED_CHILD)
    completed = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    before_start, parent, after_start, spawned = map(ast.literal_eval, completed.stdout.splitlines())
    assert before_start == ("started", False)  # nothing started yet: a forked child may start sim
    assert parent == (False, True)
    message, in_bad_fork = after_start
    assert message.startswith("Cannot re-initialize sim in forked subprocess. To use sim with multiprocessing, "
                              "you must use the 'spawn' start method") and in_bad_fork
    assert spawned == ("started", False)


def test_the_device_starts_at_its_first_tensor_not_at_import_or_when_asked_how_many_there_are():
    """As torch.cuda.is_initialized() answers: False after `import torch` brought sim up and after device_count() and
    is_available(), True once the first tensor reached the device (PyTorch called `_lazy_init`)."""
    from tests.conftest import run_python

    result = run_python("import torch\n"
                        "asked = (torch.sim.device_count(), torch.accelerator.is_available(), torch.sim.is_initialized())\n"
                        "torch.ones(1, device='sim')\n"
                        "print(repr((*asked, torch.sim.is_initialized())))")
    assert result.returncode == 0, result.stderr[-2000:]
    assert ast.literal_eval(result.stdout.strip().splitlines()[-1]) == (2, True, False, True)
