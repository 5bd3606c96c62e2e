"""The one module that owns the pages' stylesheet, escaping, status colours and templates."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pu1_explorer import pages

EXPLORER = Path(pages.__file__).parent


def test_escaping_badges_and_messages():
    assert pages.escape("<a href='x'>&") == "&lt;a href=&#x27;x&#x27;&gt;&amp;"
    assert pages.STATUS_COLOURS["crashed"] in pages.badge("crashed") and ">crashed</span>" in pages.badge("crashed")
    assert pages.status_colour("no such status") == pages.UNKNOWN_COLOUR
    assert "&lt;b&gt;" in pages.badge("<b>")
    assert pages.MESSAGE_COLOURS["ok"] in pages.message_html("done", "ok")
    with pytest.raises(ValueError, match="kind must be one of info, error, ok, warning, not 'loud'"):
        pages.message_html("x", "loud")


def test_templates_escape_what_they_are_given():
    from pu1_explorer.conformance import ProbeResult, Scorecard

    card = Scorecard("<sim>", "2.13", "today", 1.0, [ProbeResult("p", "passed", 0.1, "<script>x</script>")])
    page = card.to_html()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;sim&gt;" in page
    assert pages.page_css() in page


def test_the_status_colours_and_pages_live_in_one_place():
    sources = {path: path.read_text() for path in EXPLORER.rglob("*.py")}
    for colour in (pages.STATUS_COLOURS["crashed"], pages.STATUS_COLOURS["errored"]):
        assert [path.name for path, text in sources.items() if colour in text] == ["pages.py"], colour
    assert [path.name for path, text in sources.items() if re.search(r"STATUS_COLOURS\s*=", text)] == ["pages.py"]
    assert not [path for path, text in sources.items() if "<!DOCTYPE" in text]  # pages are templates
    assert {path.name for path in (EXPLORER / "templates").iterdir()} >= {"page.css", "report.html", "scorecard.html"}
