"""A pytest plugin that runs each test under the stream sanitizer (`pytest -p tests.explorer.sanitizer_plugin`).

The races found, by test, go as JSON to the file SANITIZER_FINDINGS names, so a test of the sanitizer
can run the suite's own multi-stream tests and check that only the races they write on purpose are found.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pu1_explorer.sanitizer import stream_sanitizer

FOUND: dict[str, list[str]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with stream_sanitizer("sim") as report:
        yield
    FOUND[item.nodeid] = [race.to_text() for race in report.races]


def pytest_sessionfinish(session: pytest.Session) -> None:
    Path(os.environ["SANITIZER_FINDINGS"]).write_text(json.dumps(FOUND, indent=1))
