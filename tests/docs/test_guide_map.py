"""The integration guide's map (docs/guide.md): every step of torch_sim.GUIDE with its files in sim,
its probes and its coverage, read back from the table as the site renders it; and the programs that make pages' data."""
import html
import json
import re
from pathlib import Path
from types import SimpleNamespace

import markdown
import pytest
import yaml

import torch_sim
from pu1_docs import guide_map
from pu1_docs.guide_map import GuideMapError, coverage_added, map_markdown, map_rows, nav_labels
from pu1_docs.notebook_cache import NotebookCache
from pu1_docs.page_program import PageProgram
from pu1_explorer.guide import coverage_by_step

pytestmark = pytest.mark.xdist_group("guide-map")  # one worker computes the map's rows once

ROOT = Path(__file__).resolve().parents[2]


def _site_nav() -> list:
    """mkdocs.yml's nav (the file's other entries use tags plain YAML does not load)."""
    text = (ROOT / "mkdocs.yml").read_text()
    return yaml.safe_load(text[text.index("\nnav:"):])["nav"]


def _rendered_rows(table: str) -> list[tuple[list[str], list[str]]]:
    """Each body row of the map as the site shows it: (cells as text, links), the markdown rendered as mkdocs does."""
    page = markdown.markdown(table, extensions=["tables", "md_in_html"])
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.DOTALL)[1:]:
        cells = re.findall(r"<td>(.*?)</td>", row, re.DOTALL)
        texts = [html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", "\n", cell))).strip() for cell in cells]
        rows.append((texts, re.findall(r'href="([^"]+)"', row)))
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return map_rows(torch_sim.GUIDE, coverage_by_step(torch_sim.GUIDE))


def test_the_map_lists_every_step_with_its_page_interface_files_probes_and_coverage(rows):
    labels = nav_labels(_site_nav())
    table = map_markdown(rows, labels, "2.13")
    assert "| step | what PyTorch calls (torch 2.13) | in sim (`backend/torch_sim/`) |" in table
    rendered = _rendered_rows(table)
    assert len(rendered) == len(torch_sim.GUIDE)
    for step, (cells, links) in zip(torch_sim.GUIDE, rendered):
        label, interface, sim, probes, coverage = cells
        assert links == [f"notebooks/guide_{step.number:02d}_{step.name}.ipynb"]
        assert label == labels[links[0]] and label.startswith(f"{step.number}. ")
        assert interface and "`" not in interface  # its code spans became code
        assert sim.splitlines() == ([f"csrc/{name}" for name in step.cpp] or [f"{step.module_path.name} (no C++)"])
        assert probes == ", ".join(step.probes)
        assert coverage
    measured = {row.step: row for row in coverage_by_step(torch_sim.GUIDE)}
    operators = rendered[[step.name for step in torch_sim.GUIDE].index("operators")][0][4]
    assert f"{measured['operators'].counts['kernel']:,} kernels of its own" in operators


def test_a_step_the_map_does_not_know_is_refused_by_name():
    stranger = SimpleNamespace(number=15, name="teleport", title="Teleport tensors", probes=("teleport",),
                               module_path=torch_sim.GUIDE[0].module_path, cpp_paths=())
    with pytest.raises(GuideMapError, match=r"^step 'teleport' has no interface in pu1_docs.guide_map.INTERFACES"):
        map_rows([stranger], coverage_by_step(torch_sim.GUIDE))


def test_an_interface_that_sims_sources_do_not_use_stops_the_map(monkeypatch):
    wrong = guide_map.Interface("`c10::NoSuchGuard`", ("NoSuchGuard",))
    monkeypatch.setitem(guide_map.INTERFACES, "guard", wrong)
    guard = [step for step in torch_sim.GUIDE if step.name == "guard"]
    with pytest.raises(GuideMapError, match=r"step 'guard': the map says its interface uses 'NoSuchGuard', but sim's "
                                            r"sources for it \(backend/torch_sim/guard.py, backend/torch_sim/csrc/guard.cpp\) do not"):
        map_rows(guard, coverage_by_step(torch_sim.GUIDE))


def _measured(kernel=0, fallback=0, missing=10, percent=50.0, autograd=0, autocast=0) -> dict:
    return {"counts": {"kernel": kernel, "composite_implicit": 10, "copies_to_cpu": 0, "fallback": fallback,
                       "missing": missing}, "percent": percent, "autograd": autograd, "autocast": autocast}


def test_what_a_step_adds_is_the_difference_from_the_step_before():
    assert coverage_added(None, _measured()) == "the start: 0 kernels of its own, 10 of 20 overloads with nothing"
    assert coverage_added(_measured(), _measured()) == "—"
    assert coverage_added(_measured(), _measured(kernel=1, fallback=9, missing=0, percent=55.0)) == (
        "+1 kernel of its own; +9 overloads on the fallback; −10 overloads with nothing; "
        "50.0% → 55.0% without the fallback")
    assert coverage_added(_measured(autocast=3), _measured(autograd=1, autocast=3)) == "+1 `AutogradPrivateUse1` kernel"


def test_a_page_program_output_is_kept_for_unchanged_inputs(tmp_path):
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "step.py").write_text("STEP = 1\n")
    cache = NotebookCache(tmp_path / "cache", tmp_path, {"backend": (".py",)})
    program = PageProgram("pu1_docs.no_such_program", "map", cache)
    program.cached().parent.mkdir(parents=True)
    program.cached().write_text(json.dumps({"rows": []}))
    assert program.data({}) == {"rows": []}  # kept: nothing started (the module does not exist)
    (tmp_path / "backend" / "step.py").write_text("STEP = 2\n")
    next_build = PageProgram("pu1_docs.no_such_program", "map", NotebookCache(cache.folder, tmp_path, cache.inputs))
    assert next_build.cached() != program.cached() and not next_build.cached().is_file()  # a change: a new name
