"""The guide shows the code a vendor starts from: each of sim's files on a step's page names where
`pu1-explorer new mydev` writes it, and the backend built from those files is that code renamed."""
from __future__ import annotations

import html
import re
from pathlib import Path
from types import SimpleNamespace

from pu1_explorer.new_backend import generated_path, renamer
from pu1_explorer.widgets.guide import driver_calls_html, guide_step, sources_html
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the run's one build of mydev)
from tests.vendor_backend import DEVICE, vendor_library, vendor_source
from torch_sim import GUIDE


def page_text(page: str) -> str:
    """What a reader sees of an HTML fragment: its text without tags and entities."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_guide_page_of_a_step_names_where_a_vendors_backend_has_each_file():
    page = page_text(guide_step(GUIDE, "guard", run_checks=False).static_html())
    assert (f"backend/torch_sim/csrc/guard.cpp (src/torch_{DEVICE}/csrc/guard.cpp of pu1-explorer new {DEVICE})"
            in page)
    assert f"backend/torch_sim/guard.py (src/torch_{DEVICE}/guard.py of pu1-explorer new {DEVICE})" in page


def test_a_file_that_is_not_sims_gets_no_vendor_path():
    source = SimpleNamespace(caption="toy's C++ file", path="examples/toy/csrc/toy.cpp", text="int x;", language="cpp")
    page = page_text(sources_html(SimpleNamespace(name="kernels", sources=(source,))))
    assert "examples/toy/csrc/toy.cpp" in page and "pu1-explorer new" not in page


def test_every_file_a_guide_page_shows_is_built_into_the_generated_backend_renamed(vendor_backend):  # noqa: F811
    """A compiler saw the code of every page: each step's C++ file is in the csrc/ the generated backend's library
    was built from, each Python module in its installed package, as sim's text with sim renamed."""
    installed = Path(vendor_backend["PYTHONPATH"])
    source, library = vendor_source(installed), vendor_library(installed)
    rename = renamer(DEVICE)
    assert library is not None
    shown = [shown for step in GUIDE for shown in step.sources]
    assert len(shown) >= len(GUIDE)
    for file in shown:
        path = generated_path(file.path, DEVICE)
        built = source / path if file.language == "cpp" else installed / Path(path).relative_to("src")
        if file.path != "backend/torch_sim/autoload.py":  # the template's own: a vendor's backend claims the key
            assert built.read_text() == rename(file.text), built
        if built.suffix == ".cpp":
            assert library.stat().st_mtime >= built.stat().st_mtime, f"{built} is newer than {library}"


def test_a_page_lists_the_driver_calls_of_its_steps_cpp_when_the_backend_names_them():
    allocator = page_text(guide_step(GUIDE, "allocator", run_checks=False).static_html())
    assert "The driver calls this step's C++ makes, in the order they first appear:" in allocator
    assert "simMalloc" in allocator and "simFree" in allocator
    cpp = SimpleNamespace(caption="C++", path="x.cpp", text="int x;", language="cpp")
    silent = SimpleNamespace(name="guard", sources=(cpp,), driver_calls=())
    assert driver_calls_html(silent) == "<p>The driver: this step's C++ calls no function of the driver's C API itself.</p>"
    assert driver_calls_html(SimpleNamespace(name="guard", sources=(cpp,))) == ""  # a backend that names no driver
