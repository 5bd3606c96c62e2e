"""The coverage after each bring-up step, measured in this one fresh process.

`python -m pu1_explorer.guide.measure_coverage --device D --bring-up M:F --variable V [--rows] -- STEP...`

For each STEP in turn, sets `--variable` to it and calls `--bring-up` (`module:function`), then
prints one JSON line: the step, its transitive counts, the percentage that runs without the
fallback, the overloads with the backend's own Autograd and Autocast kernels and, with `--rows`,
every overload's status. An empty STEP measures before anything is brought up.
"""
from __future__ import annotations

import argparse
import json
import os

from pu1_explorer.guide.brought_up import call


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pu1_explorer.guide.measure_coverage",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--device", required=True, help="the device's name, e.g. sim")
    parser.add_argument("--bring-up", required=True, metavar="MODULE:FUNCTION")
    parser.add_argument("--variable", required=True, help="the environment variable that names the step")
    parser.add_argument("--rows", action="store_true", help="also print every overload's status")
    parser.add_argument("steps", nargs="+", help="the steps, in bring-up order ('' for none)")
    arguments = parser.parse_args(argv)
    import torch  # noqa: F401

    from pu1_explorer.op_coverage import coverage

    for step in arguments.steps:
        if step:
            os.environ[arguments.variable] = step
            call(arguments.bring_up)
        snapshot = coverage("PrivateUse1", label=arguments.device)
        summary = snapshot.summary()
        measured = {"step": step or None,
                    "counts": {status: value["count"] for status, value in summary["transitive"].items()},
                    "percent": summary["without_fallback_percent"],
                    "autograd": sum(row.autograd == "kernel" for row in snapshot.rows),
                    "autocast": sum(row.autocast == "kernel" for row in snapshot.rows)}
        if arguments.rows:
            measured["rows"] = {row.operator: f"{row.backend}|{row.autograd}|{row.autocast}" for row in snapshot.rows}
        print(json.dumps(measured), flush=True)


if __name__ == "__main__":
    main()
