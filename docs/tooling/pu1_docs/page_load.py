"""What a page of the site costs a reader who has nothing cached: bytes transferred and decoded, requests, and when
the load event ended, measured in Chromium (Playwright) over the served site.

Each page loads in a browser context of its own, so nothing is cached, and is measured once its figures have drawn
(scrolled to, each in turn). The browser's Resource Timing entries give the sizes: `transferSize` (what came over the
wire, compressed where the server compressed) and `decodedBodySize` (what the browser had to parse).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# Chromium as the browser tests and the benchmark run it: headless in a container, no GPU, nothing fetched on its own
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic")

# True once every figure of the page has drawn its SVG (plotly.js loaded, ran and laid the figure out); until then,
# scrolls to the first figure not drawn yet: a figure draws only when it comes near the window (figure-loader.js).
DRAW_EVERY_FIGURE = ("() => { const waiting = [...document.querySelectorAll('.plotly-graph-div')]"
                     ".filter(figure => !figure.querySelector('.main-svg'));"
                     " if (waiting.length) waiting[0].scrollIntoView(); return waiting.length === 0; }")
# A page's script, run before the page's own (Playwright's add_init_script): when each figure drew, from the
# "pu1-figure-drawn" event that figure-loader.js sends once it drew one.
RECORD_FIGURE_DRAWS = ("window.pu1FigureDrawn = new Map(); document.addEventListener('pu1-figure-drawn',"
                       " event => window.pu1FigureDrawn.set(event.target, performance.now()));")
# [when the last figure on the first screen drew] ([0]: none is there); false while one is still to draw.
FIRST_SCREEN_DRAWN = ("() => { const first = [...document.querySelectorAll('.plotly-graph-div')]"
                      ".filter(figure => figure.getBoundingClientRect().top < window.innerHeight);"
                      " return first.every(figure => window.pu1FigureDrawn.has(figure))"
                      " && [Math.max(0, ...first.map(figure => window.pu1FigureDrawn.get(figure)))]; }")
MEASURE = """() => {
    const navigation = performance.getEntriesByType('navigation')[0];
    const entries = [navigation, ...performance.getEntriesByType('resource')];
    const sum = key => entries.reduce((total, entry) => total + (entry[key] || 0), 0);
    return {transferred: sum('transferSize'), decoded: sum('decodedBodySize'), requests: entries.length,
            load_ms: navigation.loadEventEnd};
}"""


def site_pages(site: Path) -> list[str]:
    """Every page of the built site at `site`, as its path under the site's root ("" for the home page)."""
    return sorted(str(path.relative_to(site).parent).replace(".", "") for path in site.rglob("index.html")
                  if "assets" not in path.parts)


@dataclass(frozen=True)
class PageLoad:
    """One page loaded with an empty cache: `transferred` and `decoded` are bytes summed over the page and everything
    it requested by then; `load_ms` is when its load event ended, from the start of the navigation, and
    `first_screen_ms` when, as well, every figure on its first screen had drawn (the page as a reader sees it
    before scrolling)."""

    page: str
    transferred: int
    decoded: int
    requests: int
    load_ms: float
    first_screen_ms: float


def without_cache(page) -> None:
    """Make a Playwright page of Chromium load everything afresh at each navigation (Chrome DevTools Protocol's
    Network.setCacheDisabled), so that one page can measure many pages as uncached loads."""
    session = page.context.new_cdp_session(page)
    session.send("Network.enable")
    session.send("Network.setCacheDisabled", {"cacheDisabled": True})


def measured(page, page_path: str) -> PageLoad:
    """What a page just loaded with RECORD_FIGURE_DRAWS, not scrolled yet, has loaded since its navigation began, once
    it was scrolled to each figure and every one has drawn (so plotly.js is counted wherever a page draws)."""
    [first_screen_drawn] = page.wait_for_function(FIRST_SCREEN_DRAWN, timeout=30_000).json_value()
    page.wait_for_function(DRAW_EVERY_FIGURE, timeout=30_000)
    found = page.evaluate(MEASURE)
    return PageLoad(page_path, int(found["transferred"]), int(found["decoded"]), int(found["requests"]),
                    float(found["load_ms"]), max(float(found["load_ms"]), float(first_screen_drawn)))


def load_pages(base_url: str, pages: Iterable[str], chromium: str, flags: Iterable[str] = CHROMIUM_FLAGS,
               viewport: dict[str, int] | None = None) -> list[PageLoad]:
    """Load each page (a path under `base_url`, "" for the home page) in a fresh context of Chromium at `chromium`."""
    from playwright.sync_api import sync_playwright

    loads: list[PageLoad] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=list(flags))
        try:
            for page_path in pages:
                context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
                context.add_init_script(RECORD_FIGURE_DRAWS)
                try:
                    page = context.new_page()
                    page.goto(base_url + page_path, wait_until="load")
                    loads.append(measured(page, page_path))
                finally:
                    context.close()
        finally:
            browser.close()
    return loads
