"""The fork server: each program runs in a fresh child as `python` would run it, and its ending is reported."""
import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import pytest

from pu1_explorer import forkserver
from pu1_explorer.guide import find_step, forked_check, run_check, step_before
from torch_sim import GUIDE

from .test_scorecard import alive

ENV = dict(os.environ, SIM_FALLBACK="silent")


def test_a_child_runs_as_python_would_with_the_environment_argv_and_folder(tmp_path):
    env = dict(ENV, PU1_MARK="seen")
    program = "import os, sys; print(os.environ['PU1_MARK'], sys.argv, repr(sys.path[0]), os.getcwd(), __name__)"
    completed = forkserver.run(["-c", program, "one"], env, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["seen", "['-c',", "'one']", "''", os.getcwd(), "__main__"]
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\n")
    completed = forkserver.run([str(script), "a", "b"], env, timeout=60)
    assert completed.stdout.split() == ["__main__", "['a',", "'b']", str(tmp_path)]


def test_backends_load_after_the_fork_exactly_when_import_torch_would_load_them():
    program = ("import sys, torch; print(torch.device('privateuseone').type, 'torch_sim' in sys.modules, "
               "sys.modules['torch'].__file__ == {!r})".format(sys.modules["torch"].__file__))
    loaded = forkserver.run(["-c", program], dict(ENV, TORCH_DEVICE_BACKEND_AUTOLOAD="1"), timeout=60)
    assert loaded.stdout.split() == ["sim", "True", "True"], loaded.stderr
    not_loaded = forkserver.run(["-c", program], dict(ENV, TORCH_DEVICE_BACKEND_AUTOLOAD="0"), timeout=60)
    assert not_loaded.stdout.split() == ["privateuseone", "False", "True"], not_loaded.stderr


def test_a_forked_child_may_start_the_device_because_the_template_never_starts_one():
    program = "import torch; torch.ones(1, device='sim'); print(torch.sim._is_in_bad_fork(), torch.sim.is_initialized())"
    started = forkserver.run(["-c", program], dict(ENV, TORCH_DEVICE_BACKEND_AUTOLOAD="1"), timeout=60)
    assert started.stdout.split() == ["False", "True"], started.stderr


def test_exit_codes_signals_and_tracebacks_are_reported_as_for_a_process_of_its_own():
    assert forkserver.run(["-c", "raise SystemExit(3)"], ENV, timeout=60).returncode == 3
    assert forkserver.run(["-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], ENV,
                          timeout=60).returncode == -signal.SIGSEGV
    failed = forkserver.run(["-c", "1 / 0"], ENV, timeout=60)
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[1:] == ['  File "<string>", line 1, in <module>',
                                              "ZeroDivisionError: division by zero"]
    # the template is untouched by what its children did
    assert forkserver.run(["-c", "print('still here')"], ENV, timeout=60).stdout == "still here\n"


def test_a_child_ends_as_python_ends_threads_finished_and_exit_handlers_run():
    program = ("import atexit, threading, time\natexit.register(print, 'exit handler', flush=True)\n"
               "threading.Thread(target=lambda: (time.sleep(0.3), print('thread', flush=True))).start()\n"
               "print('main', flush=True)\n")
    python = subprocess.run([sys.executable, "-c", program], env=ENV, capture_output=True, text=True, timeout=60)
    forked = forkserver.run(["-c", program], ENV, timeout=60)
    assert forked.stdout == python.stdout == "main\nthread\nexit handler\n"
    exited = forkserver.run(["-c", "import atexit, sys\natexit.register(print, 'ending')\nsys.exit(4)"], ENV,
                            timeout=60)
    assert (exited.returncode, exited.stdout) == (4, "ending\n")


def test_a_child_skips_the_templates_exit_finalizers_and_runs_its_own():
    # the template's are torch's operator libraries deregistering themselves, which a process about to end does not
    # need; a finalizer the program registers runs at exit as in `python`
    program = ("import gc, weakref\nimport torch\n"
               "finalizers = [f for f in gc.get_objects() if isinstance(f, weakref.finalize)]\n"
               "inherited = [f for f in finalizers if f.atexit]\n"
               "class Resource: pass\nkept = Resource()\n"
               "weakref.finalize(kept, print, 'own finalizer', flush=True)\n"
               "print(len(finalizers) > 100, len(inherited), flush=True)\n")
    env = dict(ENV, TORCH_DEVICE_BACKEND_AUTOLOAD="0")  # no backend adds finalizers of its own
    python = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    forked = forkserver.run(["-c", program], env, timeout=60)
    assert python.stdout.splitlines()[1:] == forked.stdout.splitlines()[1:] == ["own finalizer"]
    (python_many, python_count), (forked_many, forked_count) = (run.stdout.split()[:2] for run in (python, forked))
    assert (python_many, forked_many, forked_count) == ("True", "True", "0") and int(python_count) > 100


def test_a_child_that_outlives_its_time_is_killed_with_its_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    program = (f"import subprocess, time\nchild = subprocess.Popen(['sleep', '600'])\n"
               f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired):  # without the time limit, the program would end after 600 s
        forkserver.run(["-c", program], ENV, timeout=5)
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # a bounded wait: fails only if the grandchild outlives the group's kill
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(grandchild)


def test_a_module_runs_as_python_m_would_in_the_folder_and_environment_of_the_request(tmp_path):
    (tmp_path / "probe_module.py").write_text("import os, sys\nprint(__name__, sys.argv, sys.path[0], os.getcwd(), "
                                              "os.environ.get('PU1_MARK'))\n")
    with open(tmp_path / "out", "w+b") as out:
        process = forkserver.fork_server(ENV).start(["-m", "probe_module", "x"], out.fileno(), out.fileno(),
                                                    cwd=str(tmp_path), env=dict(ENV, PU1_MARK="request"))
        assert process.wait(timeout=60) == 0
        out.seek(0)
        printed = out.read().decode()
    assert printed.split() == ["__main__", f"[{str(tmp_path / 'probe_module.py')!r},", "'x']", str(tmp_path),
                               str(tmp_path), "request"]


def test_a_template_imports_what_it_is_asked_to_preload_and_nothing_more():
    program = "import sys; print('xml.dom.minidom' in sys.modules)"
    assert forkserver.run(["-c", program], ENV, timeout=60).stdout == "False\n"
    server = forkserver.fork_server(ENV, preload=("xml.dom.minidom",))
    assert server is not forkserver.fork_server(ENV)
    with open(os.devnull, "wb") as null, __import__("tempfile").TemporaryFile("w+b") as out:
        assert server.start(["-c", program], out.fileno(), null.fileno()).wait(timeout=60) == 0
        out.seek(0)
        assert out.read() == b"True\n"


def test_a_child_whose_caller_died_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    caller = (f"import os, time\nfrom pu1_explorer import forkserver\n"
              f"child = forkserver.fork_server(dict(os.environ)).start(['-c', 'import time; time.sleep(600)'], 1, 2)\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", caller], env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and process.poll() is None, "the caller never started its child"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert alive(child)
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def test_a_bad_command_line_is_one_clear_error_before_anything_runs():
    with pytest.raises(ValueError, match=r"argv must be \['-c', code, \.\.\.\], \['-m', module, \.\.\.\] or "
                                         r"\[script, \.\.\.\], not \[\]"):
        forkserver.run([], ENV, timeout=60)
    for incomplete in (["-c"], ["-m"]):
        with pytest.raises(ValueError, match="argv must be"):
            forkserver.run(incomplete, ENV, timeout=60)


def test_a_template_that_cannot_start_says_why_in_one_line():
    server = forkserver.fork_server(ENV, preload=("pu1_a_module_nobody_wrote",))  # a template of its own
    with pytest.raises(RuntimeError, match="the fork server did not start a process: ModuleNotFoundError: No module "
                                           "named 'pu1_a_module_nobody_wrote'"):
        server.start(["-c", "print(1)"], 1, 2)


def test_only_a_few_templates_are_kept():
    for number in range(forkserver.MAX_SERVERS + 2):  # a variable torch's import might read: a template each
        forkserver.run(["-c", "pass"], dict(ENV, TEMPLATE_NUMBER=str(number)), timeout=60)
    assert len(forkserver.kept_templates()) == forkserver.MAX_SERVERS


@pytest.mark.parametrize("warnings", ["", "ignore", "error::DeprecationWarning,default::UserWarning",
                                      "i:a message:UserWarning:json:3,all::xml.dom.NotAWarning,bogus,error:::x:-1"])
def test_requests_that_differ_only_in_what_a_child_sets_again_share_a_template_and_match_a_fresh_python(warnings):
    program = ("import faulthandler, os, sys, warnings, torch\n"
               "print(os.environ['SIM_MARK'], faulthandler.is_enabled(), sys.warnoptions, warnings.filters)")
    env = dict(ENV, PYTHONWARNINGS=warnings, PYTHONFAULTHANDLER="1" if warnings else "", SIM_MARK=warnings or "none",
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    forked = forkserver.run(["-c", program], env, timeout=60)
    templates = set(forkserver.kept_templates())  # with this request's: the next must start no other
    fresh = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert forked.stdout == fresh.stdout
    forked_rejects, fresh_rejects = ([line for line in run.stderr.splitlines() if line.startswith("Invalid -W option")]
                                     for run in (forked, fresh))
    assert forked_rejects == fresh_rejects and len(fresh_rejects) == (3 if "bogus" in warnings else 0)
    forkserver.run(["-c", "pass"], dict(env, PYTHONWARNINGS="always", JPY_SESSION_NAME="x", SIM_MARK="other",
                                            PYTEST_CURRENT_TEST="another test (call)"), 60)
    assert set(forkserver.kept_templates()) == templates


def test_kinetos_log_level_is_read_by_the_child_at_its_first_profile_so_templates_are_shared():
    program = ("import torch\nfrom torch.profiler import profile\nwith profile():\n    torch.ones(2) + 1\n"
               "print('profiled')")
    env = dict(ENV, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    for level, kineto_logs in (("4", True), ("6", False)):  # 4: errors, and its USDT markers that rank above them
        request = dict(env, KINETO_LOG_LEVEL=level)
        forked = forkserver.run(["-c", program], request, timeout=60)
        fresh = subprocess.run([sys.executable, "-c", program], env=request, capture_output=True, text=True, timeout=60)
        assert forked.stdout == fresh.stdout == "profiled\n", forked.stderr + fresh.stderr
        assert ("profiler_start" in forked.stderr) == ("profiler_start" in fresh.stderr) == kineto_logs
    assert forkserver.fork_server(dict(env, KINETO_LOG_LEVEL="4")).address == forkserver.fork_server(env).address
    # with the daemon on, importing torch initialises kineto, so the template has read the level
    daemon = dict(env, KINETO_USE_DAEMON="1", KINETO_LOG_LEVEL="4")
    assert forkserver.startup_environment(daemon)["KINETO_LOG_LEVEL"] == "4"


def test_a_shared_template_starts_children_in_the_environment_its_caller_asked_for():
    # two callers whose environments differ only in what a child reads after the fork get one template, and each
    # its own environment by default (toy's scorecard once ran its probes in sim's)
    first = forkserver.fork_server(dict(ENV, SIM_MARK="first"))
    second = forkserver.fork_server(dict(ENV, SIM_MARK="second"))
    assert first.address == second.address
    for server, mark in ((first, "first"), (second, "second"), (first, "first")):
        with __import__("tempfile").TemporaryFile("w+b") as out:
            assert server.start(["-c", "import os; print(os.environ['SIM_MARK'])"], out.fileno(), 2).wait(60) == 0
            out.seek(0)
            assert out.read().decode().strip() == mark


def test_a_child_searches_its_own_python_path_as_a_new_interpreter_would(tmp_path):
    (tmp_path / "pu1_probe_module.py").write_text("WHERE = 'tmp'\n")
    (tmp_path / "json.py").write_text("WHERE = 'shadow'\n")  # the template has imported the real json
    program = "import sys, pu1_probe_module; print(sys.path, pu1_probe_module.WHERE)"
    shadowing = "import json; print(getattr(json, 'WHERE', 'the real json'))"
    for env in (dict(ENV, PYTHONPATH=f"{tmp_path}{os.pathsep}relative/folder"), ENV):
        for code in (program, shadowing):
            forked = forkserver.run(["-c", code], env, timeout=60)
            fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
            assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout), forked.stderr + fresh.stderr
    assert "shadow" in forkserver.run(["-c", shadowing], dict(ENV, PYTHONPATH=str(tmp_path)), timeout=60).stdout


def test_a_template_started_for_a_python_path_that_hides_a_module_it_imports_still_starts(tmp_path):
    # the template serves every search path, so the first caller's never reaches its own start-up
    (tmp_path / "json.py").write_text("WHERE = 'shadow'\n")
    server = forkserver.ForkServer(dict(ENV, PYTHONPATH=str(tmp_path)))
    try:
        with __import__("tempfile").TemporaryFile("w+b") as out:
            code = "import json; print(getattr(json, 'WHERE', 'the real json'))"
            assert server.start(["-c", code], out.fileno(), 2).wait(60) == 0
            out.seek(0)
            assert out.read().decode().strip() == "shadow"
    finally:
        server.close()


def test_an_advertised_template_serves_requests_that_suit_it_and_only_those(monkeypatch):
    own = forkserver.ForkServer(ENV)
    try:
        monkeypatch.setattr(forkserver, "_SERVERS", {})
        monkeypatch.setenv(forkserver.ADVERTISED, own.advertisement())
        assert forkserver.fork_server(dict(ENV, SIM_FALLBACK="error")).address == own.address
        assert forkserver.run(["-c", "print(6 * 7)"], ENV, timeout=60).stdout == "42\n"
        assert forkserver.fork_server(ENV, preload=("xml.dom.minidom",)).address != own.address  # not preloaded
        assert forkserver.fork_server(dict(ENV, TEMPLATE_NUMBER="9")).address != own.address  # read at start-up
    finally:
        for server in forkserver.kept_templates():
            server.close()
        own.close()


@pytest.mark.parametrize("step", ["guard", "operators", "generator", "amp"])
def test_a_forked_bringup_check_says_what_a_process_of_its_own_says(step):
    for installed_until in (step_before(GUIDE, step), step):
        forked = forked_check(find_step(GUIDE, step), installed_until)
        executed = run_check(find_step(GUIDE, step), installed_until)
        assert (forked.succeeded, forked.summary) == (executed.succeeded, executed.summary)


def test_quick_children_started_from_two_threads_each_report_their_own_status():
    def run_many(first: int) -> list[int]:
        return [forkserver.run(["-c", f"raise SystemExit({code})"], ENV, timeout=60).returncode
                for code in range(first, first + 15)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run_many, (0, 100)))
    assert results == [list(range(0, 15)), list(range(100, 115))]


def test_a_template_whose_parent_was_killed_removes_its_socket_and_folder(tmp_path):
    program = ("import os, signal\nfrom pu1_explorer import forkserver\n"
               "print(forkserver.run(['-c', 'print(7)'], dict(os.environ), timeout=60).stdout, end='', flush=True)\n"
               "os.kill(os.getpid(), signal.SIGKILL)  # no exit handler closes the server")
    killed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                            env=dict(ENV, TMPDIR=str(tmp_path)))
    assert killed.returncode == -signal.SIGKILL and killed.stdout == "7\n", killed.stderr
    deadline = time.monotonic() + 30
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:  # the template looks for its parent every second
        time.sleep(0.2)
    assert list(tmp_path.iterdir()) == []
