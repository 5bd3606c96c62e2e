"""The device-generic report: PyTorch's OpInfos on sim against the CPU, one line each.

    python -m torch_sim.device_generic_report [--workers N] [--output PATH] [--tests PATH] [-- PYTEST_ARGS]

Runs the device-generic test module (examples/device_generic/test_sim_opinfo.py in a checkout of the
project) over the full OpInfo sweep (SIM_FULL_OPINFO=1: forward in seven dtypes, backward in float64,
error inputs) under pytest with N xdist workers (default 2; a worker that dies is replaced, so a crashing
op shows up as a failure and the sweep goes on), reads the JUnit XML it writes, and prints per OpInfo its
worst outcome over all its tests: pass, gap (an expected failure listed in torch_sim.device_generic), skip,
or FAIL, then the totals. The same table goes to build/device-generic/results.md. The functions below
also turn a smaller run (the notebook's) into the same table.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Sequence

from torch_sim import device_generic as config

# The project's checkout when torch_sim is installed from it (editable), where the test module lives.
ROOT = Path(__file__).resolve().parents[1]
TEST_MODULE = ROOT / "examples" / "device_generic" / "test_sim_opinfo.py"
RESULTS = Path("build") / "device-generic" / "results.md"
TEST_NAME = re.compile(r"^test_(?P<test>forward|backward|error_inputs)_(?P<op>.+)_(?:sim|privateuse1)(?:_(?P<dtype>[a-z0-9]+))?$")
ORDER = ("FAIL", "skip", "gap", "pass", "none")


def check_test_module(test_module: Path) -> Path:
    """`test_module` if it exists, else a one-line error that says where it comes from."""
    if not Path(test_module).is_file():
        raise FileNotFoundError(f"the device-generic test module {test_module} is not there: run from a checkout "
                                "of the project (examples/device_generic/) or pass --tests PATH")
    return Path(test_module)


def pytest_arguments(test_module: Path, junit: Path, workers: int = 0, extra: Sequence[str] = ()) -> list[str]:
    """The arguments after `python` that run the device-generic tests of `test_module`, writing JUnit XML to `junit`."""
    arguments = ["-m", "pytest", str(check_test_module(test_module)), "-q", "-rA", "--color=no", "-p",
                 "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_logging=no"]
    if workers > 0:
        arguments += ["-n", str(workers)]
    return arguments + list(extra)


def run_sweep(test_module: Path, workers: int, junit: Path, extra: Sequence[str]) -> tuple[int, float]:
    """Run the full sweep in a fresh interpreter; returns pytest's exit code and the seconds it took."""
    env = {**os.environ, "SIM_FULL_OPINFO": "1", "SIM_FALLBACK": "silent", "PYTORCH_PRINT_REPRO_ON_FAILURE": "1"}
    command = [sys.executable, *pytest_arguments(test_module, junit, workers, extra)]
    start = time.monotonic()
    completed = subprocess.run(command, cwd=ROOT if ROOT.is_dir() else None, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    elapsed = time.monotonic() - start
    tail = completed.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"pytest exited with {completed.returncode} after {elapsed:.0f} s: {tail[0]}", file=sys.stderr)
    return completed.returncode, elapsed


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def _detail(element) -> str:
    """The reason of a skip or expected failure, or the first line of the error of a failure."""
    message = element.get("message") or ""
    if element.tag in ("failure", "error"):
        # Prefer the exception line of the traceback ("E   RuntimeError: ...").
        for line in (element.text or "").splitlines():
            if line.startswith("E ") and line[1:].strip():
                return line[1:].strip()
    return _first_line(message) or _first_line(element.text)


Outcome = tuple[str, str, float]  # (outcome, detail, seconds)


def read_results(junit: Path) -> dict[str, dict[str, Outcome]]:
    """OpInfo formatted name -> {"forward float32" | "backward float64" | "error_inputs": outcome}."""
    results: dict[str, dict[str, Outcome]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        match = TEST_NAME.match(case.get("name", ""))
        if not match:
            continue
        outcome, detail = "pass", ""
        for child in case:
            if child.tag == "skipped":
                outcome = "gap" if "xfail" in child.get("type", "") else "skip"
                detail = _detail(child)
            elif child.tag in ("failure", "error"):
                outcome, detail = "FAIL", _detail(child)
        test = " ".join(part for part in (match.group("test"), match.group("dtype")) if part)
        results.setdefault(match.group("op"), {})[test] = (outcome, detail, float(case.get("time") or 0.0))
    return results


def _summary(tests: dict[str, Outcome], kind: str) -> str:
    """"7/7" when every dtype of one test passed, else the count and the dtypes that did not."""
    mine = {name.removeprefix(kind).strip(): outcome for name, (outcome, _, _) in tests.items()
            if name.split()[0] == kind}
    if not mine:
        return "-"
    passed = sum(outcome == "pass" for outcome in mine.values())
    others = ", ".join(f"{dtype or 'all'} {outcome}" for dtype, outcome in sorted(mine.items()) if outcome != "pass")
    return f"{passed}/{len(mine)}" + (f" ({others})" if others else "")


def build_table(results: dict[str, dict[str, Outcome]], tested_only: bool = False) -> tuple[list[tuple], dict]:
    """One row per OpInfo (name, outcome, forward, backward, error inputs, detail, seconds), and the totals.

    tested_only: leave out the OpInfos that the run did not test (a run narrowed with -k)."""
    from torch.testing._internal.common_methods_invocations import op_db

    rows = []
    for op in op_db:
        tests = results.get(op.formatted_name, {})
        if not tests and tested_only:
            continue
        if not tests:
            dtypes = ", ".join(sorted(str(dtype).removeprefix("torch.") for dtype in op.supported_dtypes("cpu")))
            rows.append((op.full_name, "none", "-", "-", "-",
                         f"no test applies: on the CPU it supports {dtypes or 'no dtype at all'}", 0.0))
            continue
        outcome = min((result[0] for result in tests.values()), key=ORDER.index)
        detail = next((result[1] for result in tests.values() if result[0] == outcome), "")
        listed = config.listed_reason(op.full_name)
        if outcome in ("gap", "skip") and listed:
            detail = listed.removeprefix("skip:").strip()
        elif outcome == "pass" and listed and listed.startswith("tolerance:"):
            detail = f"compared at a {config.TOLERANCE:g} tolerance: " + listed.removeprefix("tolerance:").strip()
        elif outcome == "pass" and op.full_name in config.SHAPES_ONLY:
            detail = f"shapes and dtypes only: {config.SHAPES_ONLY[op.full_name]}"
        seconds = sum(result[2] for result in tests.values())
        rows.append((op.full_name, outcome, _summary(tests, "forward"), _summary(tests, "backward"),
                     _summary(tests, "error_inputs"), detail.replace("|", "\\|"), seconds))
    rows.sort(key=lambda row: (ORDER.index(row[1]), row[0]))
    totals = {outcome: sum(1 for row in rows if row[1] == outcome) for outcome in ORDER}
    totals["shapes_only"] = sum(1 for row in rows if row[1] == "pass" and row[0] in config.SHAPES_ONLY)
    totals["tests"] = sum(len(tests) for tests in results.values())
    totals["tests_passed"] = sum(result[0] == "pass" for tests in results.values() for result in tests.values())
    return rows, totals


def render(rows: list[tuple], totals: dict, elapsed: float, workers: int, sweep: str = "full sweep") -> str:
    """The markdown page of a run: its summary, then one table row per OpInfo; `sweep` says which run it was."""
    import torch

    count = len(rows) - totals["none"]
    percent = 100.0 * totals["pass"] / count if count else 0.0
    lines = [
        "# sim against the CPU: PyTorch's OpInfos, bit for bit",
        "",
        f"Generated by torch_sim.device_generic_report from a run of {TEST_MODULE.name} ({sweep}); the reasons "
        "of every gap, skip and tolerance live in torch_sim.device_generic.",
        "",
        f"torch {torch.__version__}; {count} OpInfos on {os.environ.get('SIM_OPINFO_DEVICE') or 'sim:0'}, "
        f"{totals['tests']} tests (forward per dtype, backward in float64, error inputs), "
        f"{totals['tests_passed']} passed"
        + (f"; sweep took {elapsed:.0f} s with {workers or 'no'} pytest-xdist workers." if elapsed > 0 else "."),
        "",
        f"**{totals['pass']} OpInfos pass every test ({percent:.1f}%)** ({totals['shapes_only']} of them compare "
        f"shapes only), {totals['gap']} have an expected failure (gaps), {totals['skip']} are skipped, "
        f"{totals['FAIL']} fail; {totals['none']} more have no sample sim could test (no CPU dtype in common).",
        "",
        "| OpInfo | result | forward (dtypes passed) | backward | error inputs | reason | seconds |",
        "| --- | --- | --- | --- | --- | --- | ---: |",
    ]
    lines += [f"| `{name}` | {outcome} | {forward} | {backward} | {errors} | {detail} | {seconds:.2f} |"
              for name, outcome, forward, backward, errors, detail, seconds in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the full sweep (or read a JUnit XML), print one line per OpInfo and write the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", "-n", type=int, default=2, help="pytest-xdist workers (0: in one process)")
    parser.add_argument("--output", type=Path, default=(ROOT if (ROOT / "pyproject.toml").is_file() else Path.cwd())
                        / RESULTS, help="where to write the markdown table (default: build/device-generic/results.md)")
    parser.add_argument("--tests", type=Path, default=TEST_MODULE, help="the device-generic test module to run")
    parser.add_argument("--junit", type=Path, help="read this JUnit XML instead of running the sweep")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    elapsed = 0.0
    if args.junit is not None:
        junit = args.junit
    else:
        junit = Path(tempfile.mkdtemp(prefix="sim-opinfo-")) / "junit.xml"
        try:
            _, elapsed = run_sweep(args.tests, args.workers, junit, args.pytest_args)
        except FileNotFoundError as missing:
            parser.error(str(missing))
        print(f"JUnit XML: {junit}", file=sys.stderr)
        if not junit.exists():
            print("pytest wrote no JUnit XML; see its output above", file=sys.stderr)
            return 2
    rows, totals = build_table(read_results(junit))
    text = render(rows, totals, elapsed, args.workers)
    for name, outcome, forward, backward, errors, detail, _ in rows:
        print(f"{outcome:5} {name}  forward {forward}, backward {backward}, errors {errors}"
              + (f"  -- {detail}" if detail else ""))
    count = len(rows) - totals["none"]
    print(f"\n{count} OpInfos tested: " + ", ".join(f"{totals[o]} {o}" for o in reversed(ORDER[:-1]))
          + f"; {100.0 * totals['pass'] / count:.1f}% pass; {totals['none']} with no test that applies; "
          f"sweep {elapsed:.0f} s")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0 if totals["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
