"""The docs site: the real strict build, and links between its pages that lead somewhere."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def site_hooks():
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks" / "notebooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_link_check_finds_a_dead_link(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<a href="../notebooks/missing/">x</a> <a href="#top">y</a>')
    (tmp_path / "index.html").write_text('<a href="guide/">guide</a> <a href="https://example.org/">out</a>')
    assert site_hooks().dead_links(tmp_path) == ["guide/index.html: ../notebooks/missing/"]


def test_the_site_builds_strictly_and_every_link_between_its_pages_resolves(tmp_path):
    site = tmp_path / "site"
    environment = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=ROOT, capture_output=True, text=True, timeout=1800, env=environment)
    assert build.returncode == 0, build.stderr[-3000:]
    assert site_hooks().dead_links(site) == []
    # a notebook's "Next:" link to the next notebook leads to that notebook's page
    page = (site / "notebooks" / "guide_13_compile" / "index.html").read_text()
    assert 'href="../guide_14_distributed/"' in page and 'href="guide_14_distributed.ipynb"' not in page
