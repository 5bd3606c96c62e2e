"""Fresh Python processes without paying for `import torch` each time: forked from a template process.

The scorecard and the guide run every probe and check in a fresh process, and most of such a
process's time was the 2 s import of torch. A `ForkServer` is a process that imports torch once
(with backend autoloading off, so that no backend code runs before a fork) and then forks one
child per program. Each child gets its own session (a process group to kill), the caller's
stdin/stdout/stderr and environment, loads the backends `import torch` would have autoloaded,
and runs the program as `python -c CODE`, `python -m MODULE ARGS` or `python SCRIPT ARGS` would.
A crash or a hang costs only that child, and a child whose caller is gone is killed. A template can
import more modules up front (`preload`); the docs build's tooling (docs/tooling, not part of the
product) forks its Jupyter kernels from one. Run as a script, this file is the server.

Its public interface, which the scorecard, the guide's checks and the docs build's tooling use:

- `run(argv, env, timeout, cwd)`: `subprocess.run` of `python *argv`, forked; a `subprocess.CompletedProcess`;
- `fork_server(env, preload)`: the template for an environment (started on first use, at most `MAX_SERVERS`
  kept: `kept_templates()`); its `start(argv, stdout, stderr, cwd, env)` gives a `ForkedProcess`, used like a
  `subprocess.Popen`, and its `advertisement()` is what `ADVERTISED` (`PU1_FORK_SERVER`) holds so that another
  process forks from the same template;
- `startup_environment(env)`: the part of an environment a template depends on; `signal_name(returncode)`.

A template serves every request whose environment agrees with its own on what starting Python and
importing torch read (`startup_environment`): the rest may differ (the autoload switch; the warning
filters, the fault handler and the module search path, which the child sets again, with a new
interpreter instead when the request's `PYTHONPATH` would hide a module the template has imported;
and variables read only once a program runs). A process told of a running template through
`PU1_FORK_SERVER` (a forked Jupyter kernel is told of its own) forks from it instead of starting one.
"""
from __future__ import annotations

import atexit
import copy
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence

_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
ADVERTISED = "PU1_FORK_SERVER"  # a running template this process may fork from: {"address", "key", "preload"}
# Variables a template does not depend on: the child re-applies the first four (no backend loads in a template;
# warning filters, the fault handler and the module search path are set again), the rest are read only once a
# program runs (those ipykernel sets in a running kernel, the test pytest is running, Jupyter's per-kernel ones, sim's
# and the explorer's own).
_CHILD_ONLY = {_AUTOLOAD, "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONPATH", "TERM", "CLICOLOR", "CLICOLOR_FORCE",
               "FORCE_COLOR", "PAGER", "GIT_PAGER", "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL", "PYTEST_CURRENT_TEST"}
_CHILD_ONLY_PREFIXES = ("JPY_", "SIM_", "PU1_")
# kineto, torch.profiler's library, reads its log level when it initialises: at a process's first profile, or while
# torch is imported when KINETO_USE_DAEMON is set (then the template has read it).
_KINETO_LOG_LEVEL, _KINETO_DAEMON = "KINETO_LOG_LEVEL", "KINETO_USE_DAEMON"


def signal_name(returncode: int) -> str:
    """The name of the signal a negative exit code stands for (SIGSEGV, ...)."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def startup_environment(env: dict[str, str]) -> dict[str, str]:
    """The part of `env` a template depends on: every variable but those a child re-applies or reads later."""
    child_only = _CHILD_ONLY if _KINETO_DAEMON in env else _CHILD_ONLY | {_KINETO_LOG_LEVEL}
    return {name: value for name, value in env.items()
            if name not in child_only and not name.startswith(_CHILD_ONLY_PREFIXES)}


def _key(env: dict[str, str], preload: Sequence[str]) -> str:
    return json.dumps([sorted(startup_environment(env).items()), sorted(preload)])


class ForkedProcess:
    """A child of a fork server, used like a `subprocess.Popen`: pid, wait(), poll(), send_signal(), kill()."""

    stdin = stdout = stderr = None  # its streams are the caller's file descriptors, not pipes

    def __init__(self, connection: socket.socket, pid: int, received: bytes = b"") -> None:
        self._connection = connection
        self.pid = pid
        self.returncode: int | None = None
        self._received = received

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit status (negative: the signal that killed it); TimeoutExpired after `timeout`."""
        while self.returncode is None:
            chunk = b""
            if b"\n" not in self._received:
                self._connection.settimeout(timeout)
                try:
                    chunk = self._connection.recv(64)
                except TimeoutError:
                    raise subprocess.TimeoutExpired(f"forked process {self.pid}", timeout) from None
                self._received += chunk
            if not chunk or b"\n" in self._received:
                text = self._received.split(b"\n")[0].strip()
                self.returncode = int(text) if text else -signal.SIGKILL
                self._connection.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(timeout=0.0001)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def kill_group(self) -> None:
        """Kill the child and every process it started (its session), then wait for it."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # it has not called setsid yet, or it has ended
            self.kill()
        self.wait()


class ForkServer:
    """A process that imported torch (and `preload`) and forks a fresh child for each program.

    `env` is the environment the template starts in, which decides what importing torch reads (`TORCH_*`, ...);
    children get it unless a request gives its own. `address`: a template started by another process."""

    def __init__(self, env: dict[str, str], preload: Sequence[str] = (), address: str | None = None) -> None:
        self.env = dict(env)
        self.preload = tuple(preload)
        self._process: subprocess.Popen | None = None
        self._owned = address is None
        if address is not None:  # a template someone else started and keeps: see `advertisement`
            self.address = address
            return
        self._folder = tempfile.mkdtemp(prefix="pu1-forkserver-")
        self.address = os.path.join(self._folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        listener.listen(64)
        self._log = tempfile.TemporaryFile("w+b")
        # warning filters and the module search path come from the request in each child, placed as start-up would
        # place them; a search path of the first caller's could hide a module the template itself imports
        template_env = {name: value for name, value in self.env.items() if name not in ("PYTHONWARNINGS", "PYTHONPATH")}
        template_env[_AUTOLOAD] = "0"
        # In a session of its own: a Jupyter kernel ending waits for the processes of its group to end, and would
        # wait for this one until killed. The template ends by itself once its parent is gone.
        self._process = subprocess.Popen([sys.executable, __file__, str(listener.fileno()), *self.preload],
                                         env=template_env, pass_fds=[listener.fileno()], start_new_session=True,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
        listener.close()
        atexit.register(self.close)

    def start(self, argv: Sequence[str], stdout: int, stderr: int, cwd: str | None = None,
              env: dict[str, str] | None = None) -> ForkedProcess:
        """Start `python *argv` (`["-c", code, *args]`, `["-m", module, *args]` or `[script, *args]`) in a fresh
        child writing to these file descriptors, in `cwd` and `env` (default: this process's folder and the
        server's environment)."""
        if not argv or (argv[0] in ("-c", "-m") and len(argv) < 2):
            raise ValueError(f"argv must be ['-c', code, ...], ['-m', module, ...] or [script, ...], "
                             f"not {list(argv)!r}")
        request = json.dumps({"argv": list(argv), "env": self.env if env is None else env,
                              "cwd": cwd or os.getcwd()}).encode() + b"\n"
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        answer = b""
        try:
            connection.connect(self.address)
            with open(os.devnull, "rb") as stdin:
                socket.send_fds(connection, [request], [stdin.fileno(), stdout, stderr])
            while b"\n" not in answer:
                chunk = connection.recv(64)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
        if b"\n" not in answer:
            connection.close()
            raise RuntimeError(f"the fork server did not start a process: {self._log_tail()}")
        pid, rest = answer.split(b"\n", 1)  # the exit status may have come with the pid
        return ForkedProcess(connection, int(pid), rest)

    def advertisement(self) -> str:
        """What a process's `PU1_FORK_SERVER` variable holds so that it forks from this template too."""
        return json.dumps({"address": self.address, "key": _key(self.env, ()), "preload": list(self.preload)})

    @property
    def running(self) -> bool:
        """Whether the template still serves: one started here is running, one advertised is assumed to be."""
        return self._process is None or self._process.poll() is None

    @property
    def started_here(self) -> bool:
        """Whether this process started the template (False: another process advertised it)."""
        return self._process is not None

    def _log_tail(self) -> str:
        if self._process is None:
            return f"the template at {self.address} is gone"
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.seek(0)
        lines = self._log.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"it exited with code {self._process.poll()}"

    def for_environment(self, env: dict[str, str]) -> "ForkServer":
        """The same template, starting children in `env` unless a request gives its own."""
        handle = copy.copy(self)
        handle.env, handle._owned = dict(env), False
        return handle

    def close(self) -> None:
        """End the template if this handle started it; a handle to another's template leaves it running."""
        if self._process is None or not self._owned:  # not ours to end
            return
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._log.close()
        if os.path.exists(self.address):
            os.unlink(self.address)
            os.rmdir(self._folder)


_SERVERS: dict[str, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()
MAX_SERVERS = 3  # each holds a process with torch imported (about 300 MB); running children do not need it


def _advertised(env: dict[str, str], preload: Sequence[str]) -> ForkServer | None:
    """The template named by `PU1_FORK_SERVER`, if it suits `env` and has imported at least `preload`."""
    try:
        advertised = json.loads(os.environ.get(ADVERTISED, ""))
    except ValueError:
        return None
    if advertised.get("key") != _key(env, ()) or not set(preload) <= set(advertised.get("preload", ())):
        return None
    return ForkServer(env, advertised["preload"], address=advertised["address"])


def fork_server(env: dict[str, str], preload: Sequence[str] = ()) -> ForkServer:
    """The fork server for this environment and preload: the advertised one (`PU1_FORK_SERVER`) if it suits, else
    one started on first use and kept while it is among the last used."""
    key = _key(env, preload)
    with _SERVERS_LOCK:
        server = _SERVERS.pop(key, None)
        if server is None or not server.running:
            server = _advertised(env, preload) or ForkServer(env, preload)
        _SERVERS[key] = server
        while len(_SERVERS) > MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        return server if server.env == env else server.for_environment(env)


def kept_templates() -> list[ForkServer]:
    """The templates `fork_server` keeps for this process, least recently used first."""
    with _SERVERS_LOCK:
        return list(_SERVERS.values())


def run(argv: Sequence[str], env: dict[str, str], timeout: float, cwd: str | None = None
        ) -> subprocess.CompletedProcess:
    """`subprocess.run([python, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)`, forked:
    the child's process group is killed and TimeoutExpired raised when it outlives `timeout`."""
    with tempfile.TemporaryFile("w+b") as stdout, tempfile.TemporaryFile("w+b") as stderr:
        process = fork_server(env).start(argv, stdout.fileno(), stderr.fileno(), cwd=cwd, env=env)
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill_group()
            raise
        outputs = []
        for stream in (stdout, stderr):
            stream.seek(0)
            outputs.append(stream.read().decode("utf-8", "replace"))
    return subprocess.CompletedProcess([sys.executable, *argv], returncode, *outputs)


_DEFAULT_FILTERS = 0  # how many warning filters the interpreter starts with (set when the template starts)
_TEMPLATE_WARNOPTIONS: list[str] = []  # the template's own start-up warning options (dev mode's), kept in children
_TEMPLATE_PATHS: list[str] = []  # the template's PYTHONPATH entries, as start-up put them on sys.path
_EXIT_CODE: int | None = None  # set in a child once its program has ended: the code it exits with
_WARNING_ACTIONS = ("default", "always", "ignore", "module", "once", "error")  # in the order a prefix picks one


def _python_path(environment: Mapping[str, str]) -> list[str]:
    return [os.path.abspath(entry) for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _shadows_a_loaded_module(folders: Sequence[str]) -> bool:
    """Whether a module already imported (by the template) could be found in one of `folders` instead."""
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(name.split(".")[0] in sys.modules for name in names):
            return True
    return False


def _warning_category(name: str) -> type[Warning]:
    """The class a warning option names (`UserWarning`, `package.module.SomeWarning`), imported as start-up does."""
    if not name:
        return Warning
    module_name, _, class_name = name.rpartition(".")
    try:
        module = importlib.import_module(module_name or "builtins")
    except (ImportError, TypeError, ValueError):
        raise ValueError(f"invalid module name: {module_name!r}") from None
    category = getattr(module, class_name, None)
    if category is None:
        raise ValueError(f"unknown warning category: {name!r}")
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise ValueError(f"invalid warning category: {name!r}")
    return category


def _warning_filter(option: str) -> tuple[str, str, type[Warning], str, int]:
    """`warnings.filterwarnings`'s arguments for a -W / PYTHONWARNINGS option "action:message:category:module:lineno",
    whose message and module match literally (the whole module name); ValueError says what is wrong with it."""
    fields = [field.strip() for field in option.split(":")]
    if len(fields) > 5:
        raise ValueError(f"too many fields (max 5): {option!r}")
    action, message, category, module, lineno = fields + [""] * (5 - len(fields))
    actions = ["always"] if action == "all" else [name for name in _WARNING_ACTIONS if name.startswith(action)]
    if not actions:
        raise ValueError(f"invalid action: {action!r}")
    try:
        line = int(lineno or 0)
    except ValueError:
        raise ValueError(f"invalid lineno {lineno!r}") from None
    if line < 0:
        raise ValueError(f"invalid lineno {line}")
    import re

    return (actions[0], re.escape(message) if message else "", _warning_category(category),
            re.escape(module) + r"\Z" if module else "", line)


def _apply_warning_options(options: Sequence[str]) -> None:
    """Add the filters `options` ask for where start-up adds them: in front of the interpreter's defaults, behind
    those the template's imports added, which go back in front in the order the imports left them."""
    if not options:
        return
    filters = warnings.filters
    added = filters[:len(filters) - _DEFAULT_FILTERS]
    del filters[:len(added)]  # every change below goes through filterwarnings, which also marks the filters changed
    for option in options:
        try:
            warnings.filterwarnings(*_warning_filter(option))
        except ValueError as error:
            print("Invalid -W option ignored:", error, file=sys.stderr)  # what start-up prints
    for action, message, category, module, lineno in reversed(added):
        warnings.filterwarnings(action, getattr(message, "pattern", message or ""), category,
                                getattr(module, "pattern", module or ""), lineno)


def _apply_startup_variables(argv: Sequence[str]) -> None:
    """Set the warning filters, the fault handler and the module search path from this child's environment, as
    Python's start-up does; a search path that would hide a module the template has imported gets a new
    interpreter instead (`argv` is what it runs)."""
    import faulthandler

    wanted = _python_path(os.environ)
    if wanted != _TEMPLATE_PATHS:
        if _shadows_a_loaded_module([folder for folder in wanted if folder not in _TEMPLATE_PATHS]):
            sys.stdout.flush(), sys.stderr.flush()
            os.execve(sys.executable, [sys.executable, *argv], dict(os.environ))
        for folder in _TEMPLATE_PATHS:
            if folder in sys.path:
                sys.path.remove(folder)
        sys.path[1:1] = wanted  # right after the program's own folder, as at start-up
        importlib.invalidate_caches()

    options = [option for option in os.environ.get("PYTHONWARNINGS", "").split(",") if option]
    sys.warnoptions[:] = _TEMPLATE_WARNOPTIONS + options
    _apply_warning_options(options)
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    else:
        faulthandler.disable()


def _load_backends() -> None:
    """Load and call every `torch.backends` entry point, as `import torch` does unless its documented switch
    `TORCH_DEVICE_BACKEND_AUTOLOAD` is set to anything but 1."""
    from importlib.metadata import entry_points

    if os.environ.get(_AUTOLOAD, "1") != "1":
        return
    for extension in entry_points(group="torch.backends"):
        try:
            extension.load()()
        except Exception as error:
            raise RuntimeError(f"the backend extension {extension.name!r} did not load (set {_AUTOLOAD}=0 to "
                               f"start without autoloading backends)") from error


def _run_child(request: dict) -> None:
    """In the forked child: become `python *argv` with the requested environment, then end as `python` ends.

    The child ends by raising SystemExit up to the server's top level, so that the interpreter itself waits for the
    program's non-daemon threads and runs the exit handlers; the last of those (`_end_child`) then ends it."""
    global _EXIT_CODE
    import runpy

    _EXIT_CODE = 1  # from here on the process is a child, which `_end_child` ends
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    _apply_startup_variables(request["argv"])
    try:
        _load_backends()
        argv = request["argv"]
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as ended:  # the interpreter prints a code that is not a number, as for `python`
        _EXIT_CODE = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
        raise
    except BaseException as error:
        import traceback

        # from the program's own frames on, as `python` would print it
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        del error
        raise SystemExit(1) from None
    _EXIT_CODE = 0
    raise SystemExit(0)


def _end_child() -> None:
    """An exit handler the template registers before any other, so that it runs last: a child ends here, right
    after its exit handlers, without the rest of the interpreter's clean-up (tearing down the modules and the
    native state the template built, which the child does not own and which takes about 0.4 s)."""
    if _EXIT_CODE is None:  # the template itself ends as usual
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(_EXIT_CODE)


def _wait_unless_abandoned(pid: int, connection: socket.socket) -> int:
    """`waitpid(pid)`; if the caller hangs up first (it ended or dropped the process), kill the child's session."""
    import selectors

    try:
        child = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd on this system: the child outlives a caller that died
        return os.waitpid(pid, 0)[1]
    with selectors.DefaultSelector() as selector:
        selector.register(child, selectors.EVENT_READ)
        selector.register(connection, selectors.EVENT_READ)
        while not any(key.fd == child for key, _ in selector.select()):
            if not connection.recv(64):
                selector.unregister(connection)
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                        break
                    except (ProcessLookupError, PermissionError):
                        pass
    os.close(child)
    return os.waitpid(pid, 0)[1]


def _serve(listener: socket.socket, preload: Sequence[str]) -> None:
    """Accept requests until the parent is gone; each one: fork a watcher that forks the child and reports."""
    import gc

    global _DEFAULT_FILTERS, _TEMPLATE_PATHS, _TEMPLATE_WARNOPTIONS
    atexit.register(_end_child)  # first, so that it runs last
    _DEFAULT_FILTERS = len(warnings.filters)
    _TEMPLATE_WARNOPTIONS = list(sys.warnoptions)
    _TEMPLATE_PATHS = _python_path(os.environ)
    import torch  # noqa: F401  (the point of the template)

    for module in preload:
        importlib.import_module(module)
    # torch's operator libraries deregister themselves at exit (weakref finalizers, about 30 ms a process): of no
    # use in a child about to end, so the finalizers the template made do not run when its children exit
    # (`finalize.atexit` is their documented switch; the collector lists every live one)
    for finalizer in gc.get_objects():
        if isinstance(finalizer, weakref.finalize):
            finalizer.atexit = False

    parent = os.getppid()
    address = listener.getsockname()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # watchers are reaped by the system
    listener.settimeout(0.2)  # how soon a template whose parent is gone notices it
    _accept_until_orphaned(listener, parent)  # a forked child leaves it by SystemExit, never reaching what follows
    # a parent that ended without closing the server (a killed kernel) left the socket and its folder to the template
    if os.path.exists(address):
        os.unlink(address)
        os.rmdir(os.path.dirname(address))


def _accept_until_orphaned(listener: socket.socket, parent: int) -> None:
    """Serve requests while `parent` lives: each one forks a watcher, which forks the child and reports on it."""
    while os.getppid() == parent:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        while not message.endswith(b"\n"):
            message += connection.recv(1 << 20)
        if os.fork() == 0:  # the watcher
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            pid = os.fork()
            if pid == 0:
                connection.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                _run_child(json.loads(message))
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            status = _wait_unless_abandoned(pid, connection)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            try:
                connection.sendall(f"{code}\n".encode())
            finally:
                os._exit(0)
        connection.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    sys.path[0] = ""  # as for `python -c`: this file's folder (the explorer's modules) is not on the path
    _serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2:])
