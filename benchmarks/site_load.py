"""How fast each page of the built site loads for a reader with nothing cached, in Chromium over the local server.

Serves the site that `make docs` built (or `--site DIR`) as `make docs` serves it, loads every page in a fresh
browser context (pu1_docs.page_load) and prints, for each page, the bytes transferred and decoded, the requests,
when the load event ended, and when the figures on the first screen had drawn as well (a figure draws as it comes near
the window: figure-loader.js). Targets: at most 2 MB transferred a page (a test asserts it) and a load event within
1.5 s (measured here only).
"""
from __future__ import annotations

import argparse
import shutil
import threading
from pathlib import Path

from pu1_docs.page_load import load_pages, site_pages
from pu1_docs.serve_site import site_server

ROOT = Path(__file__).resolve().parent.parent
TARGET_BYTES, TARGET_MS = 2_000_000, 1500.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site", help="the built site (default: site/)")
    arguments = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("Debian's chromium is not installed: run `make setup`")
    server = site_server(arguments.site, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        loads = load_pages(base, [page + ("/" if page else "") for page in site_pages(arguments.site)], chromium)
    finally:
        server.shutdown()
    print("| page | transferred | decoded | requests | load event | first screen drawn |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for load in loads:
        print(f"| {load.page or '(home)'} | {load.transferred / 1e6:.2f} MB | {load.decoded / 1e6:.2f} MB | "
              f"{load.requests} | {load.load_ms:.0f} ms | {load.first_screen_ms:.0f} ms |")
    heaviest = max(loads, key=lambda load: load.transferred)
    slowest = max(loads, key=lambda load: load.load_ms)
    late = [load for load in loads if load.load_ms > TARGET_MS]
    print(f"\nheaviest: {heaviest.page or '(home)'} {heaviest.transferred / 1e6:.2f} MB transferred "
          f"(target ≤ {TARGET_BYTES / 1e6:.0f} MB); slowest: {slowest.page or '(home)'} load event at "
          f"{slowest.load_ms:.0f} ms (target ≤ {TARGET_MS:.0f} ms); {len(late)} of {len(loads)} pages' load events "
          f"after {TARGET_MS:.0f} ms; all load events summed: {sum(load.load_ms for load in loads) / 1000:.1f} s")


if __name__ == "__main__":
    main()
