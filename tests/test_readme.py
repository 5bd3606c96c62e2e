"""The README a user reads first: short, its two commands, its steps table and its command lines true."""
import re
import shlex
from pathlib import Path

from pu1_explorer.__main__ import build_parser
from torch_sim import GUIDE

PROJECT = Path(__file__).resolve().parent.parent
README = (PROJECT / "README.md").read_text()


def test_the_readme_is_at_most_12000_characters():
    assert 0 < len(README) <= 12_000


def test_the_quick_start_has_the_two_commands_and_ci_runs_the_second():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^make (\w+)", quick_start.split("```bash", 1)[1].split("```", 1)[0], re.MULTILINE)
    assert commands == ["docs", "test"]
    assert "make test" in (PROJECT / ".ci" / "run").read_text()


def test_the_steps_table_is_the_guide_and_names_files_that_exist():
    rows = re.findall(r"^\| +(\d+) \| `(\w+)` \|.*\| `(\w+\.py)` \| ((?:`\w+\.(?:cpp|h)`(?:, )?)+|—) \|$", README,
                      re.MULTILINE)
    assert [(int(number), name) for number, name, _, _ in rows] == [(step.number, step.name) for step in GUIDE]
    for (_, name, module, cpp), step in zip(rows, GUIDE):
        assert (PROJECT / "backend" / "torch_sim" / module).is_file() and module == f"{name}.py"
        shown_cpp = tuple(re.findall(r"`([^`]+)`", cpp))
        assert shown_cpp == step.cpp, f"the README's row of step {step.number} lists {shown_cpp}, its record {step.cpp}"


def test_every_command_line_in_the_readme_parses():
    lines = [line.split("  #", 1)[0] for line in README.splitlines() if line.startswith("pu1-explorer ")]
    assert len(lines) >= 5
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])  # argparse exits (a failure here) on an unknown option
