"""A program whose output a page of the site shows (the landing page's pictures, the guide's map), run by the build.

The program is a module run as `python -m MODULE` that prints one line of JSON last. The build starts it before the
notebooks, in a process forked from the notebook kernels' template so that it runs beside them, and keeps its output
in the executed notebooks' cache, under a name that changes with what the notebooks import: an unchanged project
reuses it without running the program.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pu1_docs.notebook_cache import NotebookCache


class PageProgramError(RuntimeError):
    """The program failed: the message ends with the end of its error output."""


class PageProgram:
    """`MODULE`'s output for a page: `start(environment)` before the notebooks, `data()` when the page is made."""

    def __init__(self, module: str, label: str, cache: NotebookCache, timeout: float = 300.0) -> None:
        self.module, self.label, self.cache, self.timeout = module, label, cache, timeout
        self._running: tuple[Any, Any, Any] | None = None

    def cached(self) -> Path:
        """Where the output is kept: its name holds the digest of what the notebooks import."""
        return self.cache.folder / f"{self.label}-{self.cache.inputs_digest()[:20]}.json"

    def start(self, environment: dict[str, str]) -> None:
        """Start the program in a fresh process forked from the kernels' template, unless its output is kept; the
        program's own fresh processes fork from the same template."""
        from pu1_explorer.forkserver import ADVERTISED, fork_server

        from pu1_docs.forked_kernel import PRELOAD

        if self._running is not None or self.cached().is_file():
            return
        stdout, stderr = tempfile.TemporaryFile("w+b"), tempfile.TemporaryFile("w+b")
        server = fork_server(environment, PRELOAD)
        process = server.start(["-m", self.module], stdout.fileno(), stderr.fileno(),
                               env=dict(environment, **{ADVERTISED: server.advertisement()}))
        self._running = (process, stdout, stderr)

    def data(self, environment: dict[str, str]) -> dict:
        """The program's output: kept from an earlier build, or awaited (started now if `start` was not called)."""
        cached = self.cached()
        if cached.is_file():
            return json.loads(cached.read_text(encoding="utf-8"))
        self.start(environment)
        (process, stdout, stderr), self._running = self._running, None
        with stdout, stderr:
            try:
                returncode = process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                process.kill_group()
                raise PageProgramError(f"python -m {self.module} did not finish within {self.timeout:.0f} s") from None
            stdout.seek(0), stderr.seek(0)
            output, errors = stdout.read().decode("utf-8", "replace"), stderr.read().decode("utf-8", "replace")
        lines = output.strip().splitlines()
        if returncode != 0 or not lines:
            raise PageProgramError(f"python -m {self.module} failed (exit code {returncode}): "
                                   f"{errors.strip()[-2000:] or 'it printed nothing'}")
        for stale in self.cache.folder.glob(f"{self.label}-*.json"):
            stale.unlink()
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(lines[-1], encoding="utf-8")
        return json.loads(lines[-1])
