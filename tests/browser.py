"""Helpers for the real-browser tests: Debian's Chromium driven by Playwright, never a downloaded browser."""
from __future__ import annotations

import contextlib
import shutil
from typing import Iterator

import pytest

from pu1_docs.page_load import CHROMIUM_FLAGS


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Debian's chromium is not installed: run `make browser`, which installs it with apt-get "
                    "(`make test` runs it first)")
    return path


@contextlib.contextmanager
def browser_page(width: int = 1400, height: int = 1000) -> Iterator[tuple[object, list[str]]]:
    """A fresh page and the list its console errors are collected into."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page, errors
        finally:
            browser.close()
