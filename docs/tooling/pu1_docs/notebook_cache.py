"""The cache of executed notebooks: a notebook runs again only when it, or what it imports and reads, changed.

An entry is the executed notebook, named by the notebook's stem and a key: a hash of the notebook's bytes, of the
versions of torch and Python, and of every source and data file under the folders the notebooks import and read from
(the project's packages and the example backend), the docs tooling included, leaving out what builds write there. A notebook keeps one entry: storing a
new one removes the others of the same notebook.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path


def _generated(path: Path) -> bool:
    """Whether `path` lies in a folder that builds and installs write (not a source of the project)."""
    return any(part in ("build", "__pycache__") or part.endswith(".egg-info") for part in path.parts[:-1])


class NotebookCache:
    """Executed notebooks in `folder`, keyed on the notebook and on the files under `root`/`inputs` (a folder each,
    with the suffixes that count)."""

    def __init__(self, folder: Path, root: Path, inputs: Mapping[str, Sequence[str]]) -> None:
        self.folder = Path(folder)
        self.root = Path(root)
        self.inputs = dict(inputs)
        self._inputs_digest: str | None = None

    def inputs_digest(self) -> str:
        """A hash of what every notebook depends on besides itself (computed once per cache object)."""
        if self._inputs_digest is None:
            digest = hashlib.sha256(f"torch {version('torch')} python {platform.python_version()}".encode())
            for folder, suffixes in sorted(self.inputs.items()):
                for path in sorted((self.root / folder).rglob("*")):
                    if path.suffix in suffixes and path.is_file() and not _generated(path.relative_to(self.root)):
                        digest.update(str(path.relative_to(self.root)).encode() + b"\0" + path.read_bytes())
            self._inputs_digest = digest.hexdigest()
        return self._inputs_digest

    def key(self, notebook: Path) -> str:
        """The key of `notebook` as it is now."""
        digest = hashlib.sha256(notebook.read_bytes())
        digest.update(self.inputs_digest().encode())
        return digest.hexdigest()[:20]

    def _entry(self, notebook: Path) -> Path:
        return self.folder / f"{notebook.stem}-{self.key(notebook)}.ipynb"

    def lookup(self, notebook: Path) -> Path | None:
        """The executed copy of `notebook` as it is now, if one was stored."""
        entry = self._entry(notebook)
        return entry if entry.is_file() else None

    def store(self, notebook: Path, executed: Path) -> Path:
        """Keep `executed` as the executed copy of `notebook` as it is now; returns the entry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        entry = self._entry(notebook)
        for stale in self.folder.glob(f"{notebook.stem}-*.ipynb"):
            stale.unlink()
        partial = entry.with_name(f".{entry.name}.{os.getpid()}")
        shutil.copyfile(executed, partial)
        os.replace(partial, entry)  # whole or not at all, for a build that is interrupted
        return entry
