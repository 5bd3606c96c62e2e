"""The guide shows the template: each step's "what a vendor writes" is its excerpt of the backend that
`pu1-explorer new mydev` generates (regions between `[guide: STEP]` markers), code the build compiles."""
from __future__ import annotations

import html
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from pu1_explorer.new_backend import TEMPLATE, NewBackendError, guide_excerpts, render, vendor_excerpts
from pu1_explorer.widgets.guide import guide_step, sources_html
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the run's one build of mydev)
from tests.vendor_backend import DEVICE, vendor_library, vendor_source
from torch_sim import GUIDE

PROJECT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"\[(/?)guide: ([a-z_]+)\]")
# Names the hand-written excerpts that the template's replaced used: made-up calls no compiler saw.
OLD_STRINGS = ("guide_vendor", "vendor_code", "my_runtime_device_count", "my_set_current_device", "MyGuardImpl",
               "MyAllocator", "MyHooks", "MyGenerator", "my_cpu_fallback", "MyFusedGelu", "MyTensorMeta",
               "MyActivityProfiler", "ProcessGroupMyccl", "MyScheduling", "The C++ a vendor writes for this step")


def page_text(page: str) -> str:
    """What a reader sees of an HTML fragment: its text without tags and entities."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_every_guide_step_has_an_excerpt_of_the_template():
    excerpts = vendor_excerpts()
    missing = [step.name for step in GUIDE if not excerpts.get(step.name)]
    assert not missing, f"guide steps with no [guide: STEP] region in explorer/pu1_explorer/vendor_template: {missing}"
    for step in GUIDE:
        for excerpt in excerpts[step.name]:
            assert excerpt.step == step.name and excerpt.device == DEVICE and excerpt.text.strip()
            assert excerpt.caption == f"What a vendor writes: `{excerpt.path}` of `pu1-explorer new {DEVICE}`"
    assert [excerpt.path for excerpt in excerpts["guard"]] == ["csrc/guard.cpp"]
    assert [excerpt.path for excerpt in excerpts["autoload"]] == ["pyproject.toml", f"src/torch_{DEVICE}/__init__.py"]
    assert {excerpt.language for step in excerpts.values() for excerpt in step} == {"cpp", "python", "toml"}


def test_every_marker_in_the_template_names_a_guide_step_and_is_closed():
    steps = {step.name for step in GUIDE}
    for path in sorted(TEMPLATE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        opened: list[str] = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for closing, step in MARKER.findall(line):
                where = f"{path.relative_to(TEMPLATE)}:{number}"
                assert step in steps, f"{where}: [guide: {step}] is not a step of torch_sim.GUIDE"
                if closing:
                    assert step in opened, f"{where}: [/guide: {step}] closes no open region"
                    opened.remove(step)
                else:
                    opened.append(step)
        assert not opened, f"{path.relative_to(TEMPLATE)}: regions left open: {opened}"


def test_excerpts_are_the_generated_files_text_and_regions_may_nest():
    files = {path.as_posix(): text for path, text in render(DEVICE).items()}
    for excerpts in vendor_excerpts().values():
        for excerpt in excerpts:
            for part in excerpt.text.split("\n\n"):
                assert part in files[excerpt.path], (excerpt.step, excerpt.path)
    nested = "a\n// [guide: operators]\nb\n# [guide: autograd]\nc\n# [/guide: autograd]\nd\n// [/guide: operators]\n"
    assert guide_excerpts(nested) == {"operators": "b\nc\nd", "autograd": "c"}


def test_the_built_backend_is_compiled_and_installed_from_the_excerpted_files(vendor_backend):  # noqa: F811
    """A compiler saw every excerpt: C++ excerpts are in the csrc/ files the build compiled into the library, Python
    ones in the installed package, TOML ones in the project that pip installed."""
    installed = Path(vendor_backend["PYTHONPATH"])
    source, library = vendor_source(installed), vendor_library(installed)
    assert library is not None
    for excerpts in vendor_excerpts().values():
        for excerpt in excerpts:
            built = source / excerpt.path
            if excerpt.language == "cpp":
                assert built.parent.name == "csrc" and built.suffix == ".cpp"
                assert library.stat().st_mtime >= built.stat().st_mtime, f"{built} is newer than {library}"
            if excerpt.language == "python":
                built = installed / Path(excerpt.path).relative_to("src")
            for part in excerpt.text.split("\n\n"):
                assert part in built.read_text(), (excerpt.step, built)


def test_the_guide_page_of_a_step_shows_its_excerpts_of_the_template():
    page = guide_step(GUIDE, "guard", run_checks=False).static_html()
    assert "What a vendor writes: <code>csrc/guard.cpp</code> of <code>pu1-explorer new mydev</code>" in page
    assert vendor_excerpts()["guard"][0].text in page_text(page)
    autoload = page_text(sources_html(next(step for step in GUIDE if step.name == "autoload")))
    assert f'{DEVICE} = "torch_{DEVICE}:_autoload"' in autoload and "def _autoload() -> None:" in autoload
    assert autoload.index("pyproject.toml of") < autoload.index("__init__.py of")


def test_a_step_the_template_does_not_mark_says_so():
    page = sources_html(SimpleNamespace(name="kernels", sources=()))
    assert page_text(page) == "The template of pu1-explorer new has no code marked for the step kernels."


def test_no_file_of_the_packages_holds_the_hand_written_excerpts():
    assert not (PROJECT / "backend" / "guide_vendor").exists()
    found = {}
    for folder in ("backend", "explorer"):
        for path in (PROJECT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
                text = path.read_text(errors="replace")
                found.update({f"{path.relative_to(PROJECT)}: {old}": True for old in OLD_STRINGS if old in text})
    assert not found, sorted(found)
    assert not [step.name for step in GUIDE if any(source.path is None for source in step.sources)]


def test_excerpts_for_a_bad_name_are_refused_in_one_line():
    with pytest.raises(NewBackendError, match=r"^invalid device name 'My-Dev' for the guide's excerpts: lowercase"):
        vendor_excerpts("My-Dev")
