"""mkdocs hooks: execute the notebooks for the site, check what they produced, self-host plotly.js.

Before the build, every notebook in notebooks/ is executed in a fresh kernel (with a
time limit per cell) into docs/notebooks/, in static mode (EXPLORER_STATIC=1) so that
widgets leave kernel-free HTML. The build fails on a cell error, on a warning that a
cell did not declare (tag `warnings-expected`), and on an output the HTML page would
lose (a figure or widget with no HTML form). After the build, plotly.js is copied
from the plotly package into the site, and every page is checked for scripts
loaded from the network and for figures that did not make it into the page.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import posixpath
import re
import shutil
import time
from pathlib import Path

import nbformat
from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.notebooks")
ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "notebooks"
EXECUTED = ROOT / "docs" / "notebooks"
CACHE = ROOT / "build" / "notebook-cache"
CELL_TIMEOUT = int(os.environ.get("DOCS_CELL_TIMEOUT", "300"))
HTML_MIMES = {"text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml", "text/plain",
              "application/javascript"}
_started = 0.0


def _fingerprint(notebook: Path) -> str:
    digest = hashlib.sha256(notebook.read_bytes())
    for folder in ("backend", "explorer"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".cpp", ".json") and "__pycache__" not in path.parts:
                digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def check_outputs(name: str, notebook: nbformat.NotebookNode) -> list[str]:
    """Problems the page would hide: lost figures or widgets, and undeclared warnings."""
    problems = []
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                if "Warning" in output.get("text", "") and "warnings-expected" not in tags:
                    first = next(line for line in output["text"].splitlines() if "Warning" in line)
                    problems.append(f"{name}, cell {number}: an undeclared warning: {first.strip()}")
            data = output.get("data")
            if data and not (set(data) & (HTML_MIMES - {"text/plain"})) and set(data) - {"text/plain"}:
                problems.append(f"{name}, cell {number}: an output the page cannot show ({', '.join(sorted(data))})")
    return problems


def execute(source: Path) -> tuple[str, float, list[str]]:
    """Execute one notebook into docs/notebooks (or reuse an identical earlier run); returns its problems."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    started = time.perf_counter()
    target = EXECUTED / source.name
    cached = CACHE / f"{source.stem}-{_fingerprint(source)}.ipynb"
    if cached.exists():
        shutil.copyfile(cached, target)
        return source.name, 0.0, check_outputs(source.name, nbformat.read(cached, as_version=4))
    notebook = nbformat.read(source, as_version=4)
    environment = dict(os.environ, EXPLORER_STATIC="1", SIM_FALLBACK="silent", PYTHONWARNINGS="default")
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(SOURCE)}})
    try:
        client.execute(env=environment)
    except CellExecutionError as error:
        summary = str(error).strip().splitlines()
        return source.name, time.perf_counter() - started, [f"{source.name}: a cell failed: {summary[-1] if summary else error}"]
    except Exception as error:  # a timeout or a dead kernel
        return source.name, time.perf_counter() - started, [f"{source.name}: {type(error).__name__}: {error}"]
    # Widgets display as HTML in static mode; their model state is of no use to the page, and
    # with it the page would load the widget manager from the network.
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, target)
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(target, cached)
    return source.name, time.perf_counter() - started, check_outputs(source.name, notebook)


def on_pre_build(config, **kwargs) -> None:
    global _started
    _started = time.perf_counter()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    sources = sorted(SOURCE.glob("*.ipynb"))
    for stale in EXECUTED.glob("*.ipynb"):
        if not (SOURCE / stale.name).exists():
            stale.unlink()
    problems: list[str] = []
    workers = int(os.environ.get("DOCS_WORKERS", "2"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for name, seconds, found in pool.map(execute, sources):
            log.info(f"executed {name} in {seconds:.1f} s" if seconds else f"reused the earlier run of {name}")
            problems += found
    if problems:
        raise PluginError("the notebooks did not build cleanly:\n  " + "\n  ".join(problems))


_NOTEBOOK_LINK = re.compile(r'href="(?![a-z][a-z0-9+.-]*:|/|#)([^"#?]+\.(?:ipynb|md))(#[^"]*)?"')


def on_page_content(html: str, page, config, files, **kwargs) -> str:
    """In a notebook's page, point links to other notebooks and pages at those pages."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html

    def to_page(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), match.group(1)))
        linked = files.get_file_from_path(target)
        if linked is None:
            raise PluginError(f"{page.file.src_uri} links to {match.group(1)}, which is not a page of the site")
        return f'href="{get_relative_url(linked.url, page.url)}{match.group(2) or ""}"'

    return _NOTEBOOK_LINK.sub(to_page, html)


_NETWORK_SCRIPT = re.compile(r"<script[^>]+src=[\"']https?://", re.IGNORECASE)
_LOCAL_HREF = re.compile(r'<a [^>]*href="(?![a-z][a-z0-9+.-]*:|#|//)([^"#?]*)[^"]*"')


def dead_links(site: Path) -> list[str]:
    """Links between the site's pages that lead nowhere: '<page>: <href>' for each."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for href in set(_LOCAL_HREF.findall(page.read_text(errors="replace"))):
            if not href:
                continue
            target = (site / href.lstrip("/")) if href.startswith("/") else (page.parent / href).resolve()
            if not (target.is_file() or (target / "index.html").is_file()):
                found.append(f"{page.relative_to(site)}: {href}")
    return found


def on_post_build(config, **kwargs) -> None:
    import plotly

    site = Path(config["site_dir"])
    target = site / "assets" / "javascripts" / "plotly.min.js"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", target)
    problems = []
    for page in site.rglob("*.html"):
        text = page.read_text(errors="replace")
        if _NETWORK_SCRIPT.search(text):
            problems.append(f"{page.relative_to(site)} loads a script from the network")
        divs = text.count('class="plotly-graph-div"')
        plots = text.count("Plotly.newPlot(")
        if divs != plots:
            problems.append(f"{page.relative_to(site)}: {divs} figure containers but {plots} figures drawn")
    problems += [f"a dead link in {link}" for link in dead_links(site)]
    if problems:
        raise PluginError("the built site has problems:\n  " + "\n  ".join(problems))
    log.info(f"the site was built in {time.perf_counter() - _started:.1f} s (notebooks executed included)")
