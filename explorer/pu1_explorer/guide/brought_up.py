"""Run a program (a guide step's check) with the backend brought up to a step, in this fresh process.

`python -m pu1_explorer.guide.brought_up [--bring-up MODULE:FUNCTION] PROGRAM`

Imports torch, brings the backend up by calling `MODULE:FUNCTION` with no arguments (the
caller has set the variable that names the step), then runs the program file as `__main__`.
Without `--bring-up` nothing is brought up: the check sees torch alone.
"""
from __future__ import annotations

import argparse
import importlib
import runpy


def call(target: str) -> None:
    """Call the function named `module:function`."""
    module, _, function = target.partition(":")
    if not module or not function:
        raise ValueError(f"--bring-up {target!r}: expected 'module:function', e.g. 'torch_sim:bring_up'")
    getattr(importlib.import_module(module), function)()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pu1_explorer.guide.brought_up", description=__doc__.split("\n")[0])
    parser.add_argument("--bring-up", metavar="MODULE:FUNCTION", help="what brings the backend up to the step")
    parser.add_argument("program", help="the check: a Python file")
    arguments = parser.parse_args(argv)
    import torch  # noqa: F401  (the check runs with torch imported, as a user's program would)

    if arguments.bring_up:
        call(arguments.bring_up)
    runpy.run_path(arguments.program, run_name="__main__")


if __name__ == "__main__":
    main()
