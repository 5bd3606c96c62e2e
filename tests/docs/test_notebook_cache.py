"""The cache of executed notebooks: an entry serves a notebook only while the notebook and what it imports stay."""
from pathlib import Path

import nbformat

from pu1_docs.notebook_cache import NotebookCache


def _project(root: Path) -> tuple[Path, NotebookCache]:
    (root / "package").mkdir(parents=True)
    (root / "package" / "module.py").write_text("VALUE = 1\n")
    (root / "package" / "notes.txt").write_text("not an input\n")
    notebook = root / "page.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")]), notebook)
    return notebook, NotebookCache(root / "cache", root, {"package": (".py",)})


def test_an_executed_notebook_is_reused_until_the_notebook_changes(tmp_path):
    notebook, cache = _project(tmp_path)
    executed = tmp_path / "executed.ipynb"
    executed.write_text("executed\n")
    assert cache.lookup(notebook) is None
    entry = cache.store(notebook, executed)
    assert cache.lookup(notebook) == entry and entry.read_text() == "executed\n"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(2)")]), notebook)
    assert cache.lookup(notebook) is None
    cache.store(notebook, executed)
    assert [path.name for path in cache.folder.iterdir()] == [cache.lookup(notebook).name]  # the old entry is gone


def test_a_change_to_what_the_notebooks_import_is_a_new_key_and_other_files_are_not(tmp_path):
    notebook, cache = _project(tmp_path)
    key = cache.key(notebook)
    (tmp_path / "package" / "notes.txt").write_text("changed, but not an input\n")
    (tmp_path / "package" / "build").mkdir()
    (tmp_path / "package" / "build" / "module.py").write_text("a copy a build made\n")
    assert NotebookCache(cache.folder, tmp_path, cache.inputs).key(notebook) == key
    (tmp_path / "package" / "module.py").write_text("VALUE = 2\n")
    assert NotebookCache(cache.folder, tmp_path, cache.inputs).key(notebook) != key
