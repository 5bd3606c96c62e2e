"""mkdocs hooks: execute the notebooks for the site, check what they produced, self-host plotly.js.

Before the build, every notebook in notebooks/ is executed in a fresh kernel (forked from a
template that has imported torch, see pu1_docs.forked_kernel; with a time limit per cell) into
docs/notebooks/, in static mode (EXPLORER_STATIC=1) so that widgets leave kernel-free HTML, or
taken from the cache of executed notebooks (pu1_docs.notebook_cache) when neither it nor what it
imports changed. The build fails on a cell error, on a warning that a cell did not declare (tag
`warnings-expected`), on a line a C++ library logged to a cell's stderr, and on an output the HTML
page would lose (a figure or widget with no HTML form). Two notebooks run at a time, the slowest first; mkdocs-jupyter renders the pages and keeps
them in its own cache (its `cache` options), beside ours. The landing page's pictures and the guide's map are the
output of programs (pu1_docs.page_program) that run beside the notebooks. After the build, the site's own plotly.js
(only the trace types its figures draw, built by `make setup` from docs/tooling/plotly_bundle) is copied into the
site, and every page is checked for scripts loaded from the network and for figures that did not make it into the
page. The notebook stylesheet that mkdocs-jupyter inlines in every notebook page becomes a link to one stylesheet,
cut down to what the site's pages use (pu1_docs.notebook_css).
"""
from __future__ import annotations

import concurrent.futures
import functools
import importlib.resources
import json
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

from pu1_docs.notebook_cache import NotebookCache
from pu1_docs.notebook_css import purge, script_words, used_classes, used_properties
from pu1_docs.page_program import PageProgram, PageProgramError

log = logging.getLogger("mkdocs.hooks.notebooks")
ROOT = Path(__file__).resolve().parents[2]
# plotly.js with only the trace types the site draws, built by `make setup` (docs/tooling/plotly_bundle)
PLOTLY_BUNDLE = ROOT / "build" / "plotly" / "plotly.min.js"
SOURCE = ROOT / "notebooks"
EXECUTED = ROOT / "docs" / "notebooks"
CACHE = Path(os.environ.get("DOCS_NOTEBOOK_CACHE", ROOT / "build" / "notebook-cache"))
CELL_TIMEOUT = int(os.environ.get("DOCS_CELL_TIMEOUT", "300"))
HTML_MIMES = {"text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml", "text/plain",
              "application/javascript"}
_started = 0.0

# Everything an executed notebook depends on besides itself: the packages it imports (sim, the explorer, the example
# backend toy), the data files they read (.json, .md), the vendor template (.jinja) and the build's own tooling.
# Nothing under tests/.
SOURCES = (".py", ".cpp", ".h", ".json", ".md", ".jinja")
NOTEBOOK_INPUTS = {"backend": SOURCES, "explorer": SOURCES, "examples": SOURCES,
                   "docs/hooks": (".py",), "docs/tooling": (".py", ".json", ".toml")}
NOTEBOOKS = NotebookCache(CACHE, ROOT, NOTEBOOK_INPUTS)


# A line a C++ library logged: the source file and line, then "] " (glog's and c10's "[W1127 00:30:40.123 x.cpp:52] ",
# kineto's "USDT:2026-11-27 00:30:40 25339:25339 SyncActivityProfilerHandler.cpp:52] profiler_start"), or the
# prefix those loggers start a line with (a severity letter or kineto's severity name, then the date or time).
_LOG_LINE = re.compile(r"[\w.-]+\.(?:cpp|cc|cxx|cu|c|h|hpp):\d+\] "
                       r"|^\[?[IWEF]\d{4} \d\d:\d\d:\d\d"
                       r"|^(?:VERBOSE|INFO|WARNING|STAGE|ERROR|USDT):\d{4}-\d\d-\d\d ")
_STDERR_OUTPUT = re.compile(r'data-mime-type="application/vnd\.jupyter\.stderr"[^>]*>\s*<pre>(.*?)</pre>', re.DOTALL)


def log_lines(text: str) -> list[str]:
    """The lines of `text` (what a cell wrote to stderr) that a C++ library logged: noise to a reader, who did not
    ask for the library's logs."""
    return [line.strip() for line in text.splitlines() if _LOG_LINE.search(line.strip())]


def pages_with_log_lines(site: Path) -> list[str]:
    """The log lines the built pages show in a cell's stderr output: '<page>: <line>' for each."""
    import html

    found = []
    for page in sorted(site.rglob("*.html")):
        for output in _STDERR_OUTPUT.findall(page.read_text(errors="replace")):
            text = html.unescape(re.sub(r"<[^>]+>", "", output))
            found += [f"{page.relative_to(site)}: {line}" for line in log_lines(text)]
    return found


def check_outputs(name: str, notebook: nbformat.NotebookNode) -> list[str]:
    """Problems the page would hide or should not show: lost figures or widgets, undeclared warnings, and lines a
    C++ library logged."""
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
                problems += [f"{name}, cell {number}: a library's log line: {line}"
                             for line in log_lines(output.get("text", ""))]
            data = output.get("data")
            if data and not (set(data) & (HTML_MIMES - {"text/plain"})) and set(data) - {"text/plain"}:
                problems.append(f"{name}, cell {number}: an output the page cannot show ({', '.join(sorted(data))})")
    return problems


def kernel_environment() -> dict[str, str]:
    """The environment the notebooks (and the landing page's pictures) run in: widgets as static HTML, sim's
    fallback quiet, warnings shown (the build fails on an undeclared one)."""
    environment = dict(os.environ, EXPLORER_STATIC="1", SIM_FALLBACK="silent", PYTHONWARNINGS="default")
    # Inductor trusts the CPU's flags instead of proving each vector instruction set anew in every process that
    # compiles (a probe compiled, then loaded by a new Python that imports torch: about 7 s a process).
    environment.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    return environment


def execute(source: Path, launched_kernel: bool = False, reuse: bool = True) -> tuple[str, float, list[str]]:
    """Execute one notebook into docs/notebooks (or, with `reuse`, reuse an identical earlier run); returns its problems.

    `launched_kernel`: run it in a kernel launched as JupyterLab launches one instead of a forked one (the notebook
    tests do, without `reuse`: the site they build then reuses their runs)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from pu1_docs.forked_kernel import KERNEL_NAME, ForkedKernelManager, LaunchedKernelManager, local_sockets

    started = time.perf_counter()
    target = EXECUTED / source.name
    cached = NOTEBOOKS.lookup(source) if reuse else None
    if cached is not None:
        shutil.copyfile(cached, target)
        return source.name, 0.0, check_outputs(source.name, nbformat.read(cached, as_version=4))
    notebook = nbformat.read(source, as_version=4)
    with local_sockets() as config:  # the kernel talks to the build over local sockets, not TCP
        # A fresh kernel, forked (see its module) or launched, killed as soon as its last cell has run: its outputs
        # are in, and ipykernel 7.4's orderly shutdown sometimes waits for an output thread it has already stopped,
        # until jupyter_client sends SIGTERM 2.5 s later.
        kernel = ("python3", LaunchedKernelManager) if launched_kernel else (KERNEL_NAME, ForkedKernelManager)
        client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name=kernel[0], allow_errors=False,
                                resources={"metadata": {"path": str(SOURCE)}}, config=config,
                                kernel_manager_class=kernel[1], shutdown_kernel="immediate")
        try:
            client.execute(env=kernel_environment())
        except CellExecutionError as error:
            summary = str(error).strip().splitlines()
            failure = f"{source.name}: a cell failed: {summary[-1] if summary else error}"
            return source.name, time.perf_counter() - started, [failure]
        except Exception as error:  # a timeout or a dead kernel
            return source.name, time.perf_counter() - started, [f"{source.name}: {type(error).__name__}: {error}"]
    # Widgets display as HTML in static mode; their model state is of no use to the page, and
    # with it the page would load the widget manager from the network.
    notebook.metadata.pop("widgets", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    NOTEBOOKS.store(source, target)
    return source.name, time.perf_counter() - started, check_outputs(source.name, notebook)


def on_config(config, **kwargs):
    """mkdocs-jupyter keeps the pages it renders in a cache of its own, keyed by the executed notebook's bytes and its
    options (its public `cache` and `cache_dir` options): beside the executed notebooks, so that one folder holds both."""
    options = config.plugins["mkdocs-jupyter"].config
    options["cache"], options["cache_dir"] = True, str(NOTEBOOKS.folder / "rendered")
    return config


# The slowest pages (see benchmarks/site_build.py) start first, so that the workers finish together.
START_FIRST = ("03_device_generic_tests.ipynb", "guide_13_compile.ipynb", "06_scorecard.ipynb",
               "guide_11_autoload.ipynb", "05_coverage.ipynb", "04_hunting_fallbacks.ipynb")


def _start_order(notebook: Path) -> tuple[int, str]:
    return (START_FIRST.index(notebook.name) if notebook.name in START_FIRST else len(START_FIRST), notebook.name)


def on_pre_build(config, **kwargs) -> None:
    global _started
    _started = time.perf_counter()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    sources = sorted(SOURCE.glob("*.ipynb"), key=_start_order)
    for stale in EXECUTED.glob("*.ipynb"):
        if not (SOURCE / stale.name).exists():
            stale.unlink()
    problems: list[str] = []
    workers = int(os.environ.get("DOCS_WORKERS", "2"))
    # the pages' programs run beside the notebooks, unless an earlier build kept their output; starts the kernels'
    # template
    for program in PAGE_PROGRAMS.values():
        program.start(kernel_environment())
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(execute, sources))
    for name, seconds, found in results:
        log.info(f"executed {name} in {seconds:.1f} s" if seconds else f"reused the earlier run of {name}")
        problems += found
    if problems:
        raise PluginError("the notebooks did not build cleanly:\n  " + "\n  ".join(problems))
    log.info(f"the notebooks were ready after {time.perf_counter() - _started:.1f} s")


_NOTEBOOK_LINK = re.compile(r'href="(?![a-z][a-z0-9+.-]*:|/|#)([^"#?]+\.(?:ipynb|md))(#[^"]*)?"')


AT_A_GLANCE = "<!-- at a glance: built by docs/hooks/notebooks.py -->"
GUIDE_MAP = "<!-- guide map: built by docs/hooks/notebooks.py -->"

# Programs whose output a page shows, by the marker the output replaces; kept while what the notebooks import stays.
PAGE_PROGRAMS = {AT_A_GLANCE: PageProgram("pu1_docs.at_a_glance", "at-a-glance", NOTEBOOKS),
                 GUIDE_MAP: PageProgram("pu1_docs.guide_map", "guide-map", NOTEBOOKS)}


def page_program_data(marker: str) -> dict:
    """The output of the program for `marker`'s page (started before the notebooks, or kept from an earlier build)."""
    program = PAGE_PROGRAMS[marker]
    try:
        return program.data(kernel_environment())
    except PageProgramError as error:
        raise PluginError(f"a page's program failed: {error}") from None


def at_a_glance_html() -> str:
    """The landing page's trace picture and coverage summary, from the real dispatcher."""
    import html

    data = page_program_data(AT_A_GLANCE)
    return (f"<p>What the dispatcher did for this code on <code>sim</code>, hop by hop (hover a marker; the buttons "
            f"hide fallthroughs or nested calls):</p>\n<pre><code>{html.escape(data['code'])}</code></pre>\n"
            f"<div class=\"figure-scroll\">{data['trace']}</div>\n"
            f"<p><b>{data['percent']}%</b> of the {data['operators']:,} ATen overloads run on <code>sim</code> "
            f"without its fallback (<b>{data['core_percent']}%</b> of the {data['core_operators']} core-ATen ones). "
            f"The rest reach sim's host fallback, which computes them on the device's memory in place. "
            f'<a href="notebooks/05_coverage/">Coverage in detail</a>.</p>\n<div class="figure-scroll">{data["coverage"]}</div>\n')


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    """The landing page gets its pictures, the guide's overview its map."""
    if AT_A_GLANCE in markdown:
        markdown = markdown.replace(AT_A_GLANCE, at_a_glance_html())
    if GUIDE_MAP in markdown:
        from pu1_docs.guide_map import map_markdown, nav_labels

        data = page_program_data(GUIDE_MAP)
        markdown = markdown.replace(GUIDE_MAP, map_markdown(data["rows"], nav_labels(config["nav"]), data["torch"]))
    return markdown


_FIGURE_SCRIPT = re.compile(r"<script([^>]*)>((?:(?!</script>).)*?Plotly\.newPlot\((?:(?!</script>).)*)</script>", re.DOTALL)
_FIGURE_ID = re.compile(r'Plotly\.newPlot\(\s*"([^"]+)"')


def _queued_figure(match: re.Match, page_path: str) -> str:
    """A figure's script, rewritten to queue its drawing for figure-loader.js, which draws it once it comes near the
    window."""
    figure = _FIGURE_ID.search(match.group(2))
    if figure is None:
        raise PluginError(f"{page_path}: a figure's script calls Plotly.newPlot without its container's id as a "
                          "string; draw figures with plotly's own HTML (fig.show() or fig.to_html())")
    figure = figure.group(1)
    return (f'<script{match.group(1)}>(window.pu1Figures = window.pu1Figures || []).push([{json.dumps(figure)}, '
            f'function () {{{match.group(2)}}}]);</script>')


_HEADING = re.compile(r'<h([1-6]) id="([^"]+)"[^>]*>(.*?)</h\1>', re.DOTALL)


def _without_anchor_link(html: str) -> str:
    return re.sub(r'<a class="(?:headerlink|anchor-link)".*?</a>', "", html, flags=re.DOTALL).strip()


def _plain_text(html: str) -> str:
    text = re.sub(r"<[^>]+>", "", _without_anchor_link(html))
    return " ".join(text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").split())


def _toc_entries(items):
    for item in items:
        yield item
        yield from _toc_entries(item.children)


# What the search index leaves out of a notebook page: the input prompts, the copy button's text and its hidden
# second copy of each cell's code, and cell outputs (computed data: tables of operators, traces, listings).
_SEARCH_NOISE = re.compile(r'<div class="(?:jp-InputPrompt[^"]*|zeroclipboard-container|clipboard-copy-txt)"')
_OUTPUT_WRAPPER = '<div class="jp-Cell-outputWrapper">'
_DIV_TAG = re.compile(r"<div\b|</div>")


def without_outputs_in_search(html: str) -> str:
    """Marks a notebook page's prompts, copy buttons and outputs `data-search-exclude`. Material's search parser
    compares elements by tag name, so an excluded element's exclusion ends at the first closing tag of its name: an
    output wrapper, whose children are <div>s too, becomes a <pu1-outputs> element (styled by its class alone)."""
    html = _SEARCH_NOISE.sub(lambda match: match.group(0) + " data-search-exclude", html)
    pieces, position = [], 0
    while (start := html.find(_OUTPUT_WRAPPER, position)) != -1:
        depth = 0
        for tag in _DIV_TAG.finditer(html, start):
            depth += 1 if tag.group(0) == "<div" else -1
            if depth == 0:
                break
        else:
            return "".join(pieces) + html[position:]  # unbalanced: leave the rest as it is
        pieces += [html[position:start], '<pu1-outputs class="jp-Cell-outputWrapper" data-search-exclude>',
                   html[start + len(_OUTPUT_WRAPPER):tag.start()], "</pu1-outputs>"]
        position = tag.end()
    return "".join(pieces) + html[position:]


def on_page_content(html: str, page, config, files, **kwargs) -> str:
    """Figures draw once they come near the window (figure-loader.js); a notebook page keeps the code in its
    title, its links to other notebooks and pages lead to those pages, and search indexes its prose and code
    but not its outputs."""
    html = _FIGURE_SCRIPT.sub(lambda match: _queued_figure(match, page.file.src_uri), html)
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = without_outputs_in_search(html)
    # mkdocs-jupyter makes the title and the table of contents from headings with their code left
    # out, so their anchors miss the headings' real ids: take both from the page's own headings.
    headings = _HEADING.findall(html)
    if headings and headings[0][0] == "1":
        page.title = _plain_text(headings[0][2])
    entries = list(_toc_entries(page.toc))
    if len(entries) == len(headings):
        for entry, (_, anchor, text) in zip(entries, headings):
            entry.id, entry.title = anchor, _without_anchor_link(text)

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


NOTEBOOK_CSS = "assets/stylesheets/notebook.css"
_INLINE_CSS = re.compile(r'<style type="text/css">(.*?)</style>\n?', re.DOTALL)
_INLINE_SCRIPT = re.compile(r"<script[^>]*>(.*?)</script>", re.DOTALL)


@functools.cache
def notebook_stylesheets() -> dict[str, str]:
    """mkdocs-jupyter's notebook stylesheets, which its template inlines unchanged in every notebook page, by name."""
    assets = importlib.resources.files("mkdocs_jupyter") / "templates" / "mkdocs_html" / "assets"
    names = ("index.css", "theme-light.css", "theme-dark.css")
    return {name: (assets / name).read_text(encoding="utf-8") for name in names}


def link_notebook_css(html: str, href: str) -> tuple[str, list[str]]:
    """`html` with mkdocs-jupyter's inlined notebook stylesheets replaced by one link to `href` (where the first of
    them was), and the names of the stylesheets it replaced."""
    inlined = {text.strip(): name for name, text in notebook_stylesheets().items()}
    replaced: list[str] = []

    def replace(match: re.Match) -> str:
        name = inlined.get(match.group(1).strip())
        if name is None:
            return match.group(0)
        replaced.append(name)
        return f'<link rel="stylesheet" href="{href}">\n' if len(replaced) == 1 else ""

    return _INLINE_CSS.sub(replace, html), replaced


def on_post_page(output: str, page, config, **kwargs) -> str:
    """A notebook page links to the site's notebook stylesheet instead of carrying mkdocs-jupyter's (585 KB)."""
    if not page.file.src_uri.endswith(".ipynb"):
        return output
    output, replaced = link_notebook_css(output, get_relative_url(NOTEBOOK_CSS, page.url))
    if not replaced:
        raise PluginError(f"{page.file.src_uri}: mkdocs-jupyter's notebook stylesheet is not inlined in the page "
                          f"(did its template change?)")
    return output


def write_notebook_css(config, pages: list[str]) -> None:
    """The stylesheet the notebook pages link to: mkdocs-jupyter's, with only the rules that can apply to the site's
    `pages` (the text of each HTML page: their classes, and those their scripts may add) and the custom properties
    that those rules or the site's other styles read."""
    site = Path(config["site_dir"])
    target = site / NOTEBOOK_CSS
    stylesheets = notebook_stylesheets()
    theme = "theme-dark.css" if config.plugins["mkdocs-jupyter"].config["theme"] == "dark" else "theme-light.css"
    styles = [path.read_text(errors="replace") for path in site.rglob("*.css") if path != target]
    scripts = [path.read_text(errors="replace") for path in site.rglob("*.js")]
    scripts += [script for page in pages for script in _INLINE_SCRIPT.findall(page)]
    css = purge(stylesheets["index.css"] + "\n" + stylesheets[theme], used_classes(pages) | script_words(scripts),
                used_properties(pages + styles))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(css, encoding="utf-8")


def on_post_build(config, **kwargs) -> None:
    site = Path(config["site_dir"])
    if not PLOTLY_BUNDLE.is_file():
        raise PluginError(f"the site's plotly.js bundle {PLOTLY_BUNDLE.relative_to(ROOT)} is missing: `make setup` "
                          "builds it (with npm, from docs/tooling/plotly_bundle)")
    target = site / "assets" / "javascripts" / "plotly.min.js"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PLOTLY_BUNDLE, target)
    pages = {page: page.read_text(errors="replace") for page in site.rglob("*.html")}
    write_notebook_css(config, list(pages.values()))  # after the scripts are in the site: it reads them
    problems = []
    for page, text in pages.items():
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
