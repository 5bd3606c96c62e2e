"""The command line, run as a user runs it."""
import json
import subprocess
import sys
from pathlib import Path

from pu1_explorer.op_coverage import core_operators
from tests.conftest import run_explorer as explorer


def test_coverage_formats():
    markdown = explorer("coverage", "--device", "sim", "--core")
    assert markdown.returncode == 0, markdown.stderr
    core = len(core_operators())
    assert "# Coverage of sim (PrivateUse1)" in markdown.stdout and f"{core} core ATen" in markdown.stdout
    data = json.loads(explorer("coverage", "--format", "json").stdout)
    assert data["summary"]["operators"] > 3000
    csv = explorer("coverage", "--core", "--format", "csv").stdout.splitlines()
    assert len(csv) == core + 1  # a header, then one row per core operator
    assert "classifying" in markdown.stderr  # progress goes to stderr
    collectives = json.loads(explorer("coverage", "--namespace", "c10d", "--format", "json").stdout)
    assert {row["operator"] for row in collectives["rows"]} >= {"c10d::allreduce_", "c10d::send"}


def test_trace_expression_in_every_format(tmp_path):
    expression = "x = torch.ones(3, device=device); (x * 2).sum()"
    tree = explorer("trace", expression, "--device", "sim")
    assert tree.returncode == 0, tree.stderr
    assert "aten::mul.Tensor @ PrivateUse1" in tree.stdout
    output = tmp_path / "trace.json"
    assert explorer("trace", expression, "--format", "json", "-o", str(output)).returncode == 0
    assert json.loads(output.read_text())["schema_version"] == 1
    chrome = json.loads(explorer("trace", expression, "--format", "chrome").stdout)
    assert chrome["traceEvents"]


def test_trace_script(tmp_path):
    script = tmp_path / "workload.py"
    script.write_text("import torch\nprint((torch.ones(2, device=device) + 1).sum().item())\n")
    result = explorer("trace", str(script), "--device", "sim", "--hide-skipped")
    assert result.returncode == 0, result.stderr
    assert "aten::add.Tensor @ PrivateUse1" in result.stdout and "skipped" not in result.stdout


def test_report_is_one_self_contained_page(tmp_path):
    output = tmp_path / "report.html"
    result = explorer("report", "--device", "sim", "-o", str(output))
    assert result.returncode == 0, result.stderr
    page = output.read_text()
    assert "Backend report: sim" in page and "Plotly.newPlot" in page
    assert "cdn" not in page.lower().split("<body>")[0]
    assert '<script src="http' not in page
    assert "[1/3]" in result.stderr and "[3/3]" in result.stderr


def test_errors_are_one_line_with_a_nonzero_exit():
    for arguments in (("table", "addd.Tensor"), ("trace", "missing_script.py"), ("coverage", "--device", "cuda"),
                      ("trace", "1/0")):
        result = explorer(*arguments)
        assert result.returncode == 1
        errors = [line for line in result.stderr.splitlines() if line.startswith("pu1-explorer: error:")]
        assert len(errors) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert "did you mean aten::add.Tensor" in explorer("table", "addd.Tensor").stderr


def test_usage_errors_exit_with_argparse_code():
    result = explorer("coverage", "--format", "xml")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_the_console_script_runs_from_any_folder(tmp_path):
    from tests.environments import colliding_folder

    script = Path(sys.executable).parent / "pu1-explorer"
    result = subprocess.run([str(script), "table", "add.Tensor"], capture_output=True, text=True,
                            timeout=300, cwd=colliding_folder(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "PrivateUse1" in result.stdout
