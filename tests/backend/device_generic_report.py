"""The device-generic report: every float32 OpInfo on sim against the CPU, one line each.

    python -m tests.backend.device_generic_report [--workers N] [--output PATH]

Runs tests/backend/test_device_generic.py over the full float32 OpInfo sweep
(SIM_FULL_OPINFO=1) under pytest with N xdist workers (default 2; a worker that
dies is replaced, so a crashing op shows up as a failure and the sweep goes on),
reads the JUnit XML it writes, and prints per OpInfo: pass, gap (an expected
failure listed in device_generic_gaps.GAPS), skip, or FAIL, then the totals and the
pass percentage. The same table goes to tests/backend/device_generic_results.md.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TEST_FILE = HERE / "test_device_generic.py"
RESULTS = HERE / "device_generic_results.md"
TEST_NAME = re.compile(r"^test_matches_cpu_(?P<op>.+)_(?:sim|privateuse1)_float32$")
ORDER = ("FAIL", "skip", "gap", "pass")


def run_sweep(workers: int, junit: Path, extra: list[str]) -> tuple[int, float]:
    env = {**os.environ, "SIM_FULL_OPINFO": "1", "SIM_FALLBACK": "silent", "PYTORCH_PRINT_REPRO_ON_FAILURE": "1"}
    command = [sys.executable, "-m", "pytest", str(TEST_FILE), "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "junit_logging=no", "-k", "test_matches_cpu"]
    if workers > 0:
        command += ["-n", str(workers)]
    command += extra
    start = time.monotonic()
    completed = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


def read_results(junit: Path) -> dict[str, tuple[str, str, float]]:
    """OpInfo formatted name -> (outcome, detail, seconds)."""
    results: dict[str, tuple[str, str, float]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        match = TEST_NAME.match(case.get("name", ""))
        if not match:
            continue
        seconds = float(case.get("time") or 0.0)
        outcome, detail = "pass", ""
        for child in case:
            if child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "gap" if "xfail" in kind else "skip"
                detail = _detail(child)
            elif child.tag in ("failure", "error"):
                outcome, detail = "FAIL", _detail(child)
        results[match.group("op")] = (outcome, detail, seconds)
    return results


def build_table(results: dict[str, tuple[str, str, float]]) -> tuple[list[tuple[str, str, str, float]], dict]:
    from torch.testing._internal.common_methods_invocations import op_db

    from tests.backend.device_generic_gaps import GAPS, SHAPES_ONLY
    from tests.backend.test_device_generic import _is_float32_op

    rows = []
    for op in op_db:
        if not _is_float32_op(op):
            continue
        outcome, detail, seconds = results.get(op.formatted_name, ("FAIL", "did not run (no test result)", 0.0))
        if outcome in ("gap", "skip") and op.full_name in GAPS:
            detail = GAPS[op.full_name].removeprefix("skip:").strip()
        elif outcome == "FAIL" and op.full_name in GAPS:
            detail = f"listed in GAPS but did not fail as expected ({detail})"
        elif outcome == "pass" and op.full_name in SHAPES_ONLY:
            detail = f"shapes and dtypes only: {SHAPES_ONLY[op.full_name]}"
        rows.append((op.full_name, outcome, detail.replace("|", "\\|"), seconds))
    rows.sort(key=lambda row: (ORDER.index(row[1]), row[0]))
    totals = {outcome: sum(1 for row in rows if row[1] == outcome) for outcome in ORDER}
    totals["shapes_only"] = sum(1 for row in rows if row[1] == "pass" and row[0] in SHAPES_ONLY)
    return rows, totals


def render(rows, totals, elapsed: float, workers: int) -> str:
    import torch

    count = len(rows)
    percent = 100.0 * totals["pass"] / count if count else 0.0
    lines = [
        "# sim against the CPU: PyTorch's float32 OpInfos",
        "",
        "Generated by `python -m tests.backend.device_generic_report` (tests/backend/test_device_generic.py, "
        "full sweep); the reasons of every gap and skip live in tests/backend/device_generic_gaps.py.",
        "",
        f"torch {torch.__version__}; {count} float32 OpInfos on {os.environ.get('SIM_OPINFO_DEVICE') or 'sim:0'}; "
        f"sweep took {elapsed:.0f} s with {workers or 'no'} pytest-xdist workers.",
        "",
        f"**{totals['pass']} pass ({percent:.1f}%)** ({totals['shapes_only']} of them compare shapes only), "
        f"{totals['gap']} expected failures (gaps), {totals['skip']} skipped, {totals['FAIL']} failing.",
        "",
        "| OpInfo | result | reason | seconds |",
        "| --- | --- | --- | ---: |",
    ]
    lines += [f"| `{name}` | {outcome} | {detail} | {seconds:.2f} |" for name, outcome, detail, seconds in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", "-n", type=int, default=2, help="pytest-xdist workers (0: in one process)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the markdown table")
    parser.add_argument("--junit", type=Path, help="read this JUnit XML instead of running the sweep")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    elapsed = 0.0
    if args.junit is not None:
        junit = args.junit
    else:
        junit = Path(tempfile.mkdtemp(prefix="sim-opinfo-")) / "junit.xml"
        _, elapsed = run_sweep(args.workers, junit, args.pytest_args)
        print(f"JUnit XML: {junit}", file=sys.stderr)
        if not junit.exists():
            print("pytest wrote no JUnit XML; see its output above", file=sys.stderr)
            return 2
    rows, totals = build_table(read_results(junit))
    text = render(rows, totals, elapsed, args.workers)
    for name, outcome, detail, _ in rows:
        print(f"{outcome:5} {name}" + (f"  -- {detail}" if detail else ""))
    count = len(rows)
    print(f"\n{count} float32 OpInfos: " + ", ".join(f"{totals[o]} {o}" for o in reversed(ORDER))
          + f"; {100.0 * totals['pass'] / count:.1f}% pass; sweep {elapsed:.0f} s")
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0 if totals["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
