"""The docs site: the real strict build, served on 127.0.0.1 and visited page by page in Chromium."""
import getpass
import gzip
import html.parser
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import types
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import nbformat
import pytest

from pu1_docs.notebook_cache import NotebookCache
from pu1_docs.page_load import CHROMIUM_FLAGS, site_pages
from pu1_docs.serve_site import site_server
from tests.browser import chromium_path

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "site-screenshots"
PLOTLY_TRACES = ROOT / "docs" / "tooling" / "plotly_bundle" / "traces.js"
# Full-page screenshots of every page, for people to look at, cost more than the checks themselves: taken on request.
TAKE_SCREENSHOTS = os.environ.get("PU1_SITE_SCREENSHOTS") == "1"
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}

pytestmark = pytest.mark.xdist_group("site")  # one worker builds the site once for every test here


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inductor_folder(temporary_folder: str) -> Path:
    """Where torch.compile keeps its cache when TORCHINDUCTOR_CACHE_DIR is unset: torch's documented default,
    `torchinductor_<user>` in the temporary folder."""
    return Path(temporary_folder) / f"torchinductor_{getpass.getuser()}"


def scratch_environment(scratch: Path) -> dict[str, str]:
    """The variables that send processes' temporary files to `scratch` (TMPDIR), which a test then checks is empty,
    while torch.compile's cache stays where it was (TORCHINDUCTOR_CACHE_DIR, or its default)."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(inductor_folder(tempfile.gettempdir())))
    return {"TMPDIR": str(scratch), "TORCHINDUCTOR_CACHE_DIR": cache}


def left_behind(scratch: Path) -> list[str]:
    """What processes told to keep their temporary files in `scratch` (TMPDIR) left there, but for inductor's
    precompiled headers, which it keeps in the temporary folder whatever its cache folder is."""
    inductor = inductor_folder(str(scratch))
    return sorted(str(path.relative_to(scratch)) for path in scratch.rglob("*")
                  if path != inductor and inductor not in path.parents)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built strictly by the real mkdocs build as `make docs` builds it (or, while working on
    these tests, a site built before: PU1_BUILT_SITE=site)."""
    if os.environ.get("PU1_BUILT_SITE"):
        return Path(os.environ["PU1_BUILT_SITE"]).resolve()
    from filelock import FileLock

    # One build per test run, whichever worker gets here first: two builds at once would share the
    # checkout's executed notebooks and their cache.
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, log = shared / "site", shared / "site-build.log"
    with FileLock(str(shared / "site.lock")):
        if not (folder / "index.html").is_file():
            # the build's temporary files go to a folder of their own, which must be empty once it is done
            scratch = shared / "site-build-tmp"
            scratch.mkdir()
            environment = dict(os.environ, NO_MKDOCS_2_WARNING="1", **scratch_environment(scratch))
            build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                                   cwd=ROOT, capture_output=True, text=True, timeout=1800, env=environment)
            log.write_text(build.stderr)
            assert build.returncode == 0, build.stderr[-3000:]
            left = left_behind(scratch)
            assert not left, f"the build left temporary files behind: {', '.join(left)}"
    assert "without encryption" not in log.read_text(), "a notebook kernel talked to the build over TCP"
    return folder


@pytest.fixture(scope="module")
def served(site) -> str:
    """The site's address on 127.0.0.1, served as `make docs` serves it."""
    server = site_server(site, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: set[str] = set()

    def handle_starttag(self, tag, attributes):
        attributes = dict(attributes)
        for name in ("id", "name"):
            if attributes.get(name):
                self.ids.add(attributes[name])
        if tag == "a" and attributes.get("href"):
            self.hrefs.add(attributes["href"])


def parsed(path: Path) -> _Anchors:
    anchors = _Anchors()
    anchors.feed(path.read_text(errors="replace"))
    return anchors


def test_the_link_check_finds_a_dead_link(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<a href="../notebooks/missing/">x</a> <a href="#top">y</a>')
    (tmp_path / "index.html").write_text('<a href="guide/">guide</a> <a href="https://example.org/">out</a>')
    assert load_hook("notebooks").dead_links(tmp_path) == ["guide/index.html: ../notebooks/missing/"]


def test_the_log_line_check_finds_what_cpp_libraries_log_and_nothing_else():
    log_lines = load_hook("notebooks").log_lines
    logged = ["USDT:2026-11-27 00:30:40 25339:25339 SyncActivityProfilerHandler.cpp:52] profiler_start",
              "STAGE:2026-11-27 00:30:40 25339:25339 ActivityProfilerController.cpp:311] Completed Stage: Warm Up",
              "[W1127 00:30:40.123456789 ProcessGroupGloo.cpp:516] Warning: Unable to resolve hostname",
              "[rank0]:[W1127 00:30:40.123 socket.cpp:759] [c10d] The client socket has failed to connect",
              "I1127 00:30:40.123456 12345 logging.cc:42] glog's own format"]
    quiet = ["/work/main/notebooks/x.py:3: UserWarning: a Python warning, which the warning check handles",
             "RuntimeError: Graph is not supported on device type: sim", "[W] a bracket alone is no log line",
             "progress: 3/10 [00:01<00:02]"]
    assert log_lines("\n".join(quiet + logged)) == logged
    assert log_lines("") == [] and log_lines("\n".join(quiet)) == []


def test_the_log_line_check_reads_the_stderr_outputs_of_a_built_page(tmp_path):
    (tmp_path / "guide").mkdir()
    stderr = ('<div class="jp-RenderedText jp-OutputArea-output" data-mime-type="application/vnd.jupyter.stderr" '
              'tabindex="0">\n<pre>USDT:2026-11-27 00:30:40 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n'
              '</pre>\n</div>')
    prose = "<p>kineto once printed <code>SyncActivityProfilerHandler.cpp:52] profiler_start</code>.</p>"
    (tmp_path / "guide" / "index.html").write_text(prose + stderr)
    (tmp_path / "index.html").write_text(prose)
    assert load_hook("notebooks").pages_with_log_lines(tmp_path) == [
        "guide/index.html: USDT:2026-11-27 00:30:40 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start"]


def test_no_page_shows_a_line_a_cpp_library_logged(site):
    assert load_hook("notebooks").pages_with_log_lines(site) == []


def test_the_build_ends_a_notebooks_kernel_at_once_after_its_last_cell(tmp_path, monkeypatch):
    # not with ipykernel's orderly shutdown, which can wait 2.5 s for SIGTERM (see `execute` in the hook)
    from tests.docs.test_forked_kernel import record_kernels

    hook = load_hook("notebooks")
    monkeypatch.setattr(hook, "EXECUTED", tmp_path / "executed")
    monkeypatch.setattr(hook, "NOTEBOOKS", NotebookCache(tmp_path / "cache", hook.ROOT, hook.NOTEBOOK_INPUTS))
    hook.EXECUTED.mkdir()
    kernels = record_kernels(monkeypatch)
    source = tmp_path / "short.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), source)
    name, _, problems = hook.execute(source)
    assert (name, problems) == ("short.ipynb", [])
    assert nbformat.read(hook.EXECUTED / name, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    assert [kernel.returncode for kernel in kernels] == [-signal.SIGKILL]


def test_every_link_and_anchor_between_the_pages_resolves(site):
    assert load_hook("notebooks").dead_links(site) == []
    # a notebook's "Next:" link to the next notebook leads to that notebook's page
    page = (site / "notebooks" / "guide_13_compile" / "index.html").read_text()
    assert 'href="../guide_14_distributed/"' in page and 'href="guide_14_distributed.ipynb"' not in page
    missing = []
    pages = {path: parsed(path) for path in site.rglob("*.html")}
    for path, anchors in sorted(pages.items()):
        for href in anchors.hrefs:
            link = urllib.parse.urlsplit(href)
            if link.scheme or link.netloc or not link.fragment or href.endswith(".ipynb"):
                continue
            target = path if not link.path else (path.parent / urllib.parse.unquote(link.path)).resolve()
            target = target / "index.html" if target.is_dir() else target
            if target.is_file() and urllib.parse.unquote(link.fragment) not in (pages.get(target) or parsed(target)).ids:
                missing.append(f"{path.relative_to(site)}: {href}")
    assert missing == []


def test_titles_keep_their_inline_code(site):
    title = (site / "notebooks" / "guide_11_autoload" / "index.html").read_text()
    assert "<title>Step 11: Load the backend with import torch - " in title
    index = json.loads((site / "search" / "search_index.json").read_text())
    titles = {entry["location"]: entry["title"] for entry in index["docs"]}
    assert titles["notebooks/03_device_generic_tests/"].startswith("Device-generic tests: PyTorch's OpInfo tests on sim")


def test_the_search_exclusion_keeps_a_nested_output_whole_and_changes_nothing_else():
    hook = load_hook("notebooks")
    page = ('<div class="jp-Cell"><div class="jp-InputPrompt jp-InputArea-prompt">In [1]:</div><pre>x = 1</pre></div>'
            '<div class="jp-Cell-outputWrapper"><div class="a"><div>out</div></div>tail</div><p>after</p>')
    assert hook.without_outputs_in_search(page) == (
        '<div class="jp-Cell"><div class="jp-InputPrompt jp-InputArea-prompt" data-search-exclude>In [1]:</div>'
        '<pre>x = 1</pre></div><pu1-outputs class="jp-Cell-outputWrapper" data-search-exclude><div class="a">'
        '<div>out</div></div>tail</pu1-outputs><p>after</p>')
    unbalanced = '<div class="jp-Cell-outputWrapper"><div>never closed'
    assert hook.without_outputs_in_search(unbalanced) == unbalanced


def test_a_figures_script_is_queued_for_the_figure_loader_and_one_without_its_containers_id_is_refused():
    from mkdocs.exceptions import PluginError

    hook = load_hook("notebooks")
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="concepts/sim.md"))
    figure = '<div class="plotly-graph-div" id="f1"></div><script type="text/javascript">Plotly.newPlot( "f1", [], {})</script>'
    assert hook.on_page_content(figure, page, config=None, files=None) == (
        '<div class="plotly-graph-div" id="f1"></div><script type="text/javascript">(window.pu1Figures = '
        'window.pu1Figures || []).push(["f1", function () {Plotly.newPlot( "f1", [], {})}]);</script>')
    without_id = '<script>const figure = document.querySelector("div"); Plotly.newPlot(figure, [], {})</script>'
    with pytest.raises(PluginError, match=r"^concepts/sim.md: a figure's script calls Plotly.newPlot without its "
                                          r"container's id as a string; draw figures with plotly's own HTML"):
        hook.on_page_content(without_id, page, config=None, files=None)


def test_search_indexes_a_notebooks_prose_and_code_but_not_its_outputs(site):
    index = json.loads((site / "search" / "search_index.json").read_text())
    text = " ".join(entry["text"] for entry in index["docs"] if entry["location"].startswith("notebooks/05_coverage/"))
    assert "Coverage answers a vendor" in text and 'CoverageExplorer(device="sim")' in text
    assert "aten::__and__.Scalar" in (site / "notebooks" / "05_coverage" / "index.html").read_text()
    assert "aten::__and__.Scalar" not in text, "a row of the coverage table, an output, is in the index"
    assert not any(noise in text for noise in ("Out[", "In\xa0[", "Copied!"))


def test_plotly_loads_only_on_pages_that_draw_and_never_blocks_the_first_paint(site):
    """plotly.js is no script of a page: the deferred figure-loader.js loads it when a figure comes near the window
    (a browser test below shows when)."""
    for page in site_pages(site) + ["404.html"]:
        text = (site / page / "index.html" if not page.endswith(".html") else site / page).read_text()
        draws = 'class="plotly-graph-div"' in text
        assert ("plotly.min.js" in text) == draws, page
        assert not re.search(r'<script[^>]+src="[^"]*plotly\.min\.js"', text), page
        if draws:
            assert re.search(r'<script defer src="[^"]*figure-loader\.js"\s+data-plotly="[^"]*plotly\.min\.js"', text), page
    pages_without_figures = [page for page in site_pages(site)
                             if 'class="plotly-graph-div"' not in (site / page / "index.html").read_text()]
    assert pages_without_figures, "every page draws: the plotly-free case is not tested"


def test_a_page_without_figures_weighs_at_most_1_5_mb(site):
    """The page and the scripts and stylesheets it loads, plotly.js included where a page draws."""
    def weight(page: Path) -> int:
        text = page.read_text()
        assets = (re.findall(r'<script[^>]+src="([^"]+)"', text) + re.findall(r'data-plotly="([^"]+)"', text)
                  + re.findall(r'<link[^>]+rel="stylesheet"[^>]+href="([^"]+)"', text))
        return len(text.encode()) + sum((page.parent / asset).resolve().stat().st_size for asset in assets
                                        if not urllib.parse.urlsplit(asset).scheme)
    pages = [site / name / "index.html" for name in site_pages(site)]
    heavy = {str(page.relative_to(site)): weight(page) for page in pages
             if 'class="plotly-graph-div"' not in page.read_text() and weight(page) > 1.5e6}
    assert heavy == {}
    plotly = (site / "assets" / "javascripts" / "plotly.min.js").stat().st_size
    assert weight(site / "notebooks" / "01_quickstart" / "index.html") > plotly  # a page that draws loads plotly.js


def drawn_figures(html: str) -> Iterator[tuple[list, dict]]:
    """The data and the layout of each figure a page draws: the arguments of its Plotly.newPlot calls."""
    decoder = json.JSONDecoder()
    for call in re.finditer(r'Plotly\.newPlot\(\s*"[^"]*",\s*', html):
        data, end = decoder.raw_decode(html, call.end())
        layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
        yield data, layout


def test_the_sites_plotly_has_the_trace_types_its_figures_draw_and_a_figures_template_only_theirs(site):
    bundled = set(re.findall(r"'(\w+)'", PLOTLY_TRACES.read_text().split("module.exports", 1)[1]))
    drawn: set[str] = set()
    figures = 0
    for page in sorted(site.rglob("*.html")):
        for data, layout in drawn_figures(page.read_text()):
            figures += 1
            types = {trace.get("type", "scatter") for trace in data}
            drawn |= types
            templated = set(layout.get("template", {}).get("data", {}))
            assert templated <= types, f"{page.relative_to(site)}: template defaults for {templated - types}"
    assert figures >= len(site_pages(site)) // 2
    assert drawn - {"scatter"} == bundled  # scatter is in plotly.js's core
    script = (site / "assets" / "javascripts" / "plotly.min.js").read_text()
    assert set(re.findall(r'moduleType:"trace",name:"(\w+)"', script)) == bundled | {"scatter"}


def test_a_missing_page_gets_the_sites_own_404_page(served):
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(served + "notebooks/no_such_page/", timeout=30)
    assert missing.value.code == 404 and "The PrivateUse1 explorer" in missing.value.read().decode()


def test_the_server_compresses_a_page_for_a_browser_that_accepts_gzip_and_only_then(site, served):
    page = site / "notebooks" / "01_quickstart" / "index.html"
    request = urllib.request.Request(served + "notebooks/01_quickstart/", headers={"Accept-Encoding": "gzip, br"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(response.read()) == page.read_bytes()
    with urllib.request.urlopen(served + "notebooks/01_quickstart/", timeout=30) as response:
        assert response.headers["Content-Encoding"] is None and response.read() == page.read_bytes()


def test_every_notebook_page_draws_a_figure(site):
    without = [path.parent.name for path in sorted(site.glob("notebooks/*/index.html"))
               if 'class="plotly-graph-div"' not in path.read_text()]
    assert without == []


def test_the_widgets_listings_are_not_code_blocks_the_theme_measures_while_a_page_loads(site):
    """Material measures each `pre > code` of a page as it loads, forcing the layout of the notebook cell around it:
    the widgets' listings (code_html) are a `<pre>` alone, and the guide pages still show them."""
    from pu1_explorer.widgets.base import code_html

    opening = code_html("x").split(">", 1)[0] + ">"
    pages = {path.parent.name: path.read_text() for path in sorted(site.glob("notebooks/*/index.html"))}
    assert all(pages[name].count(opening) >= 2 for name in pages if name.startswith("guide_"))
    assert [name for name, text in pages.items() if re.search(re.escape(opening) + r"\s*<code", text)] == []


def test_the_landing_page_shows_a_trace_and_the_coverage_made_at_build_time(site):
    home = (site / "index.html").read_text()
    assert home.count('class="plotly-graph-div"') == 2 and "hops through the dispatcher" in home
    assert re.search(r"<b>\d+\.\d+%</b> of the [\d,]+ ATen overloads run on <code>sim</code>", home)


def test_no_page_shows_a_folder_of_the_machine_that_built_it(site):
    leaks = [str(path.relative_to(site)) for path in site.rglob("*.html")
             if str(ROOT) in path.read_text(errors="replace").replace("\\u002f", "/")]
    assert leaks == []


def visit(page, url: str, draw_every_figure: bool = False) -> None:
    """Loads the page at `url`; with `draw_every_figure`, also scrolls to each figure until every one has drawn."""
    from pu1_docs.page_load import DRAW_EVERY_FIGURE

    page.goto(url, wait_until="load")
    if draw_every_figure:
        page.wait_for_function(DRAW_EVERY_FIGURE, timeout=30_000)


def test_every_page_in_chromium_draws_without_errors_or_network_and_loads_at_most_2_mb(site, served):
    """Every page at desktop and phone width: no console or page errors, no request off 127.0.0.1, every
    figure drawn with a size; with PU1_SITE_SCREENSHOTS=1, screenshots of each go to build/site-screenshots.
    At desktop width nothing is cached, and each page loads at most 2 MB (bytes transferred, from the browser's
    Resource Timing entries: pu1_docs.page_load; benchmarks/site_load.py records the sizes and the load times)."""
    from playwright.sync_api import sync_playwright

    from pu1_docs.page_load import RECORD_FIGURE_DRAWS, measured, without_cache

    problems: list[str] = []
    loads = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            for viewport_name, viewport in VIEWPORTS.items():
                folder = SCREENSHOTS / viewport_name
                folder.mkdir(parents=True, exist_ok=True)
                page = browser.new_page(viewport=viewport)
                if viewport_name == "desktop":
                    without_cache(page)
                    page.add_init_script(RECORD_FIGURE_DRAWS)
                current = {"url": ""}
                page.on("console", lambda message: problems.append(f"{current['url']}: console {message.text}")
                        if message.type == "error" else None)
                page.on("pageerror", lambda error: problems.append(f"{current['url']}: {error}"))
                page.on("request", lambda request: problems.append(f"{current['url']}: requested {request.url}")
                        if urllib.parse.urlsplit(request.url).hostname not in (None, "127.0.0.1")
                        and not request.url.startswith(("data:", "blob:")) else None)
                for name in site_pages(site):
                    current["url"] = served + name + ("/" if name else "")
                    visit(page, current["url"], draw_every_figure=viewport_name != "desktop")
                    if viewport_name == "desktop":
                        loads[name] = measured(page, name)  # draws every figure
                    for index, box in enumerate(page.eval_on_selector_all(
                            ".plotly-graph-div", "figures => figures.map(f => f.getBoundingClientRect().toJSON())")):
                        if box["width"] < 100 or box["height"] < 100:
                            problems.append(f"{name or 'home'} ({viewport_name}): figure {index + 1} is {box['width']:.0f}×{box['height']:.0f} px")
                    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                    if overflow > 1:
                        problems.append(f"{name or 'home'} ({viewport_name}): the page is {overflow} px wider than the screen")
                    if TAKE_SCREENSHOTS:
                        page.screenshot(path=str(folder / f"{name.replace('/', '_') or 'home'}.png"), full_page=True)
                page.close()
        finally:
            browser.close()
    assert problems == []
    heavy = {name or "home": load.transferred for name, load in loads.items() if load.transferred > 2e6}
    assert heavy == {}
    quickstart, plotly = loads["notebooks/01_quickstart"], (site / "assets/javascripts/plotly.min.js").stat().st_size
    assert quickstart.decoded > plotly and quickstart.requests > 3  # what the page loaded is counted, plotly.js too
    assert all(load.transferred < load.decoded for load in loads.values())  # the server compressed the text


def test_a_notebook_pages_cells_below_the_screen_are_drawn_when_they_come_into_view_and_anchors_land(site, served):
    """The site's CSS lets Chromium skip the style and layout of the cells below the first screen while a page
    loads (content-visibility: auto); a cell is drawn once scrolled to, and a link to a heading far down the page
    still puts that heading at the top of the window once the cells above it are drawn (linked-heading.js)."""
    from playwright.sync_api import sync_playwright

    page_path = "notebooks/guide_05_operators/"
    headings = re.findall(r'<h2 id="([^"]+)"', (site / page_path / "index.html").read_text())
    assert len(headings) > 3
    # whether the first element inside the page's cell at `index` (-1 the last) is drawn
    drawn = ("index => [...document.querySelectorAll('.jp-Notebook-cell')].at(index).firstElementChild"
             ".checkVisibility({contentVisibilityAuto: true})")
    # resolves once the heading has not moved for twice the frames linked-heading.js waits for before it stops (or
    # after 600 frames, so that a heading that never holds still fails the assertion after it instead of hanging)
    held_still = ("id => new Promise(resolve => { let last = null, still = 0, frames = 0; const check = () => {"
                  " const top = document.getElementById(id).getBoundingClientRect().top;"
                  " still = last !== null && Math.abs(top - last) < 1 ? still + 1 : 0; last = top;"
                  " if (still >= 20 || ++frames >= 600) resolve(); else requestAnimationFrame(check); };"
                  " requestAnimationFrame(check); })")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport=VIEWPORTS["desktop"])
            visit(page, served + page_path)
            assert page.evaluate(drawn, 0) is True  # the first cell, on the first screen
            assert page.evaluate(drawn, -1) is False
            # scrolled to again at each try: the cells drawn on the way take their real heights, which may push the
            # last one below the window again
            last = "[...document.querySelectorAll('.jp-Notebook-cell')].at(-1)"
            page.wait_for_function(f"() => {{ {last}.scrollIntoView(); return ({drawn})(-1); }}", timeout=10_000)

            # a heading far down, reached by a link from another page and by the page's own table of contents
            for heading in headings[-4:-1]:
                lands = (f"() => {{ const top = document.getElementById({json.dumps(heading)}).getBoundingClientRect().top;"
                         " const header = document.querySelector('header.md-header').getBoundingClientRect().height;"
                         " return top >= 0 && top <= header + 40; }")
                page.goto("about:blank")
                visit(page, served + page_path + "#" + heading)
                page.evaluate(held_still, heading)  # linked-heading.js has settled
                assert page.evaluate(lands), heading
                visit(page, served + page_path)
                page.locator(f"nav.md-nav--secondary a[href='#{heading}']:visible").click()
                page.evaluate(held_still, heading)
                assert page.evaluate(lands), heading
        finally:
            browser.close()


def test_a_figure_draws_and_plotly_js_loads_only_once_the_figure_comes_near_the_window(served):
    """A page whose figures are all far below the first screen reaches its load event without plotly.js; scrolled to,
    a figure draws (plotly.js loaded once). The home page's figures, within a screen of the window, draw unscrolled."""
    from playwright.sync_api import sync_playwright

    drawn = "() => [...document.querySelectorAll('.plotly-graph-div')].map(figure => !!figure.querySelector('.main-svg'))"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport=VIEWPORTS["desktop"])
            plotly_requests = []
            page.on("request", lambda request: plotly_requests.append(request.url)
                    if request.url.endswith("plotly.min.js") else None)
            visit(page, served + "notebooks/07_start_your_own_backend/")
            tops = page.eval_on_selector_all(".plotly-graph-div", "figures => figures.map(f => f.getBoundingClientRect().top)")
            assert len(tops) >= 2 and min(tops) > 3 * VIEWPORTS["desktop"]["height"]
            page.evaluate("() => new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)))")
            assert page.evaluate(drawn) == [False] * len(tops) and plotly_requests == []
            assert page.evaluate("() => window.Plotly") is None

            page.locator(".plotly-graph-div").first.scroll_into_view_if_needed()
            page.wait_for_function(f"() => ({drawn})()[0]", timeout=30_000)
            assert len(plotly_requests) == 1
            assert page.evaluate(drawn)[-1] is False  # the last figure, still far below the window
            page.locator(".plotly-graph-div").last.scroll_into_view_if_needed()
            page.wait_for_function(f"() => ({drawn})().at(-1)", timeout=30_000)
            assert len(plotly_requests) == 1

            visit(page, served)
            page.wait_for_function(f"() => ({drawn})().every(Boolean)", timeout=30_000)
            assert page.evaluate("() => window.scrollY") == 0
        finally:
            browser.close()


def test_download_links_give_valid_notebooks(site, served):
    downloads = 0
    for name in site_pages(site):
        text = (site / name / "index.html").read_text()
        for href in parsed(site / name / "index.html").hrefs:
            if href.endswith(".ipynb") and f'href="{href}" download' in text:
                with urllib.request.urlopen(urllib.parse.urljoin(served + name + "/", href), timeout=30) as response:
                    nbformat.validate(nbformat.reads(response.read().decode(), as_version=4))
                downloads += 1
    assert downloads == len(list(site.glob("notebooks/*/index.html")))


def test_search_finds_the_allocator_page_and_figures_follow_the_dark_palette(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport=VIEWPORTS["desktop"])
            page.goto(served + "notebooks/01_quickstart/", wait_until="load")
            page.click("input.md-search__input")
            page.keyboard.type("allocator")
            page.wait_for_selector(".md-search-result__link[href*='guide_04_allocator']", timeout=30_000)

            page.keyboard.press("Escape")
            # the page's figure is below the first screen: it is drawn only once scrolled to, after the palette
            # turned dark, and must draw dark; back in the light palette it gets its own colours again
            assert page.evaluate("() => document.querySelector('.plotly-graph-div .main-svg')") is None
            toggle = page.locator("form[data-md-component=palette] label:visible")
            scheme = page.get_attribute("body", "data-md-color-scheme")
            toggle.first.click()
            page.wait_for_function(f"() => document.body.getAttribute('data-md-color-scheme') !== '{scheme}'")
            assert page.get_attribute("body", "data-md-color-scheme") == "slate"
            background = "() => getComputedStyle(document.querySelector('.plotly-graph-div .main-svg')).backgroundColor"
            page.locator(".plotly-graph-div").first.scroll_into_view_if_needed()
            page.wait_for_function(f"() => document.querySelector('.plotly-graph-div .main-svg') && ({background})() === "
                                   "'rgb(30, 33, 41)'", timeout=30_000)  # figure-palette.js's dark paper
            toggle.first.click()
            page.wait_for_function(f"() => document.body.getAttribute('data-md-color-scheme') !== 'slate'")
            page.wait_for_function(f"() => ({background})() !== 'rgb(30, 33, 41)'", timeout=10_000)
            assert page.evaluate(background) == "rgb(255, 255, 255)"
            toggle.first.click()
            page.wait_for_function(f"() => ({background})() === 'rgb(30, 33, 41)'", timeout=10_000)
            if TAKE_SCREENSHOTS:
                page.screenshot(path=str(SCREENSHOTS / "quickstart-dark.png"), full_page=True)
        finally:
            browser.close()
