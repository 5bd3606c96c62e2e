"""Every guide page states in its markdown the error a vendor meets before its step, so that the page read without a
kernel (the built site, the committed notebook) shows it, not only the output of its widget.

Each step's check runs before the step as the page's widget runs it (`pu1_explorer.guide.forked_check`, a process
forked from the engine's template), and the first line of what it raised must stand, character for character, in a
fenced block or a quote of the page's markdown. Nothing is normalised: no first line holds an address, a process id
or a path of this machine (the one path, in the allocator's internal assert, is where PyTorch's wheel was built).
"""
import re
from pathlib import Path

import nbformat
import pytest

import torch_sim
from pu1_explorer.guide import GuideStep, find_step, forked_check, step_before

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
_FENCED = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def page_of(step: GuideStep) -> Path:
    """The guide page of `step`: notebooks/guide_NN_<name>.ipynb."""
    return NOTEBOOKS / f"guide_{step.number:02d}_{step.name}.ipynb"


def quoted_lines(markdown: str) -> list[str]:
    """The lines of `markdown` a reader sees verbatim: those of its fenced blocks and of its quotes (`> `)."""
    lines = [line for block in _FENCED.findall(markdown) for line in block[1].splitlines()]
    return lines + [line[1:].strip() for line in markdown.splitlines() if line.startswith(">")]


def test_quoted_lines_are_those_of_fenced_blocks_and_quotes_only():
    markdown = ("Before the step:\n\n```text\nRuntimeError: first\nsecond\n```\n\nprose RuntimeError: not quoted\n\n"
                "> ValueError: quoted\n")
    assert quoted_lines(markdown) == ["RuntimeError: first", "second", "ValueError: quoted"]
    assert quoted_lines("```text\nRuntimeError: never closed\n") == []


@pytest.mark.parametrize("name", torch_sim.STEPS)
def test_the_page_states_the_error_its_check_raises_before_the_step(name):
    step = find_step(torch_sim.GUIDE, name)
    before = forked_check(step, step_before(torch_sim.GUIDE, name))
    assert not before.succeeded and before.error, f"{name}: the check raised nothing before the step"
    first_line = before.error.splitlines()[0]
    page = page_of(step)
    markdown = "\n\n".join(cell.source for cell in nbformat.read(page, as_version=4).cells
                           if cell.cell_type == "markdown")
    assert first_line in quoted_lines(markdown), (
        f"{page.name} does not quote the error before its step; add it in a fenced block:\n{first_line}")
