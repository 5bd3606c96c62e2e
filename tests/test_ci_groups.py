"""The test command's `--dist loadgroup` keeps each `xdist_group` on one worker: the site and the wheel are built
once per run only if it does (tests/notebooks/test_site.py, tests/backend/test_install.py)."""
import subprocess
import sys
import textwrap


def test_the_tests_of_one_group_run_on_one_worker(tmp_path):
    for name in ("test_first.py", "test_second.py"):
        (tmp_path / name).write_text(textwrap.dedent(f"""
            import os
            import pytest

            pytestmark = pytest.mark.xdist_group("together")

            @pytest.mark.parametrize("index", range(4))
            def test_note_the_worker(index):
                with open({str(tmp_path / "workers.txt")!r}, "a") as workers:
                    workers.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
            """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8
    assert len(set(workers)) == 1, f"one group ran on the workers {sorted(set(workers))}"
