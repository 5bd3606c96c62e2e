"""The site's names for the guide come from `torch_sim.GUIDE`: the navigation's labels, each page's title and its
'Next:' link, and the overview's table of steps with their files."""
import json
import re
from pathlib import Path

import pytest
import yaml

import torch_sim

ROOT = Path(__file__).resolve().parents[2]
GUIDE = torch_sim.GUIDE


def page_name(step) -> str:
    return f"guide_{step.number:02d}_{step.name}.ipynb"


def _markdown(page: str) -> list[str]:
    notebook = json.loads((ROOT / "notebooks" / page).read_text())
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown"]


def guide_nav() -> list[tuple[str, str]]:
    """(label, page) of the guide's pages in mkdocs.yml's nav, in order (the file's other entries use tags plain YAML
    does not load)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = yaml.safe_load(text[text.index("\nnav:"):])["nav"]
    found: list[tuple[str, str]] = []

    def walk(entries) -> None:
        for entry in entries:
            for label, target in entry.items():
                if isinstance(target, list):
                    walk(target)
                elif re.fullmatch(r"notebooks/guide_\d\d_\w+\.ipynb", str(target)):
                    found.append((str(label), str(target)))

    walk(nav)
    return found


def next_links(markdown: list[str]) -> list[tuple[str, str]]:
    """(text, target) of every link on the page's 'Next:' lines."""
    lines = [line for cell in markdown for line in cell.splitlines() if line.startswith("Next:")]
    return [link for line in lines for link in re.findall(r"\[([^\]]+)\]\(([^)]+)\)", line)]


def test_the_navigation_labels_the_guide_pages_from_the_records():
    expected = [(f"{step.number}. {step.label}", f"notebooks/{page_name(step)}") for step in GUIDE]
    assert guide_nav() == expected, "mkdocs.yml's nav must list the guide's pages as '<number>. <label>' of GUIDE"


@pytest.mark.parametrize("step", GUIDE, ids=lambda step: step.name)
def test_a_page_is_titled_by_its_record_and_leads_to_the_next_step(step):
    markdown = _markdown(page_name(step))
    heading = markdown[0].splitlines()[0]
    assert heading == f"# Step {step.number}: {step.title}", f"{page_name(step)} starts with {heading!r}"
    links = next_links(markdown)
    following = [later for later in GUIDE if later.number == step.number + 1]
    if following:
        expected = (f"step {following[0].number}: {following[0].title}", page_name(following[0]))
        assert expected in links, f"{page_name(step)}: its 'Next:' line must link {expected}, it links {links}"
    else:
        assert links and not [target for _, target in links if target.startswith("guide_")], (
            f"{page_name(step)} is the last step: its 'Next:' line leads out of the guide, not to {links}")


def test_a_next_link_is_read_from_the_next_line_only():
    markdown = ["# Step 1: A\n\nSee [step 9: Z](guide_09_z.ipynb).\n", "Next: [step 2: B](guide_02_b.ipynb).\n"]
    assert next_links(markdown) == [("step 2: B", "guide_02_b.ipynb")]


def test_the_overview_tables_every_step_with_its_label_page_and_files():
    overview = (ROOT / "docs" / "guide.md").read_text()
    rows = re.findall(r"^\| (\d+)\. \[([^\]]+)\]\(notebooks/([^)]+)\) \| [^|]+ \| ([^|]+) \|$", overview, re.MULTILINE)
    assert [(int(number), label, page) for number, label, page, _ in rows] == [
        (step.number, step.label, page_name(step)) for step in GUIDE]
    for (_, _, _, files), step in zip(rows, GUIDE):
        assert re.findall(r"`([^`]+)`", files) == [f"{step.name}.py"] + [f"csrc/{name}" for name in step.cpp]
