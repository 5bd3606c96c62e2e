"""Command line: `python -m pu1_explorer coverage|trace|report|table ...`; see `python -m pu1_explorer --help`."""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from pathlib import Path


def _progress(message: str) -> None:
    print(f"[pu1-explorer] {message}", file=sys.stderr, flush=True)


def _backend_key(device: str) -> str:
    import torch

    kind = torch.device(device).type
    if kind == "cpu":
        return "CPU"
    if kind == "meta":
        return "Meta"
    if kind == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    raise ValueError(f"device {device!r} is neither cpu, meta nor the PrivateUse1 backend "
                     f"({torch._C._get_privateuse1_backend_name()!r})")


def _write(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text)
        _progress(f"wrote {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def command_coverage(arguments: argparse.Namespace) -> None:
    from pu1_explorer.coverage import coverage

    _progress(f"classifying every {arguments.namespace} overload for {arguments.device}")
    snapshot = coverage(_backend_key(arguments.device), label=arguments.device, namespace=arguments.namespace)
    if arguments.format == "json":
        text = snapshot.to_json()
    elif arguments.format == "csv":
        text = snapshot.to_csv() if not arguments.core else _core_csv(snapshot)
    else:
        text = snapshot.to_markdown(core_only=arguments.core)
    _write(text, arguments.output)


def _core_csv(snapshot) -> str:
    lines = snapshot.to_csv().splitlines()
    core = {row.operator for row in snapshot.rows if row.core}
    return "\n".join([lines[0]] + [line for line in lines[1:] if line.split(",")[0] in core]) + "\n"


def command_trace(arguments: argparse.Namespace) -> None:
    import torch

    from pu1_explorer.tracer import trace

    target = arguments.target
    namespace = {"torch": torch, "device": arguments.device, "__name__": "__main__"}
    if target.endswith(".py") and not Path(target).exists():
        raise FileNotFoundError(f"no such script: {target}")
    is_script = Path(target).is_file()
    code = None if is_script else compile(target, "<expression>", "exec")
    _progress(f"tracing {'script ' + target if is_script else 'the expression'} on {arguments.device}")
    with trace(arguments.device) as recorded:
        if is_script:
            runpy.run_path(target, init_globals={"device": arguments.device}, run_name="__main__")
        else:
            exec(code, namespace)
    _progress(f"{len(recorded.hops)} hops recorded")
    if arguments.format == "json":
        text = recorded.to_json(indent=1)
    elif arguments.format == "chrome":
        text = json.dumps(recorded.to_chrome_trace())
    else:
        text = recorded.to_text(show_skipped=not arguments.hide_skipped)
    _write(text, arguments.output)


def command_table(arguments: argparse.Namespace) -> None:
    from pu1_explorer.dispatch_table import dispatch_table

    keys = arguments.keys.split(",") if arguments.keys else None
    rows = dispatch_table(arguments.operator, keys)
    width = max(len(entry.key) for entry in rows)
    _write("\n".join(f"{entry.key:{width}s}  {entry.kind:32s}  {entry.provenance}" for entry in rows),
           arguments.output)


def command_report(arguments: argparse.Namespace) -> None:
    from pu1_explorer.coverage import coverage
    from pu1_explorer.fallback_report import monitor_fallbacks
    from pu1_explorer.report import build_report

    key = _backend_key(arguments.device)
    _progress(f"[1/3] classifying every ATen overload for {arguments.device}")
    snapshot = coverage(key, label=arguments.device)
    _progress("[2/3] running the reference workload (mlp, cnn, transformer: 2 training steps each)")
    from torch_sim import workloads

    with monitor_fallbacks(key) as fallbacks:
        for name in workloads.WORKLOADS:
            workloads.train(name, arguments.device, steps=2)
    _progress("[3/3] writing the page")
    page = build_report(snapshot, fallbacks, "mlp, cnn, transformer", progress=_progress)
    Path(arguments.output).write_text(page)
    _progress(f"wrote {arguments.output} ({len(page) / 1e6:.1f} MB, self-contained)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pu1-explorer",
                                     description="See what PyTorch's dispatcher does for a backend.")
    commands = parser.add_subparsers(dest="command", required=True)

    coverage = commands.add_parser("coverage", help="operator coverage of a backend")
    coverage.add_argument("--device", default="sim")
    coverage.add_argument("--core", action="store_true", help="only the core-ATen overloads")
    coverage.add_argument("--namespace", choices=("aten", "c10d"), default="aten",
                          help="the operators to classify: ATen's, or c10d's collectives")
    coverage.add_argument("--format", choices=("md", "csv", "json"), default="md")
    coverage.add_argument("-o", "--output")
    coverage.set_defaults(run=command_coverage)

    trace = commands.add_parser("trace", help="trace the dispatcher hops of a script or an expression")
    trace.add_argument("target", help="a .py file, or Python statements (`device` holds --device)")
    trace.add_argument("--device", default="sim")
    trace.add_argument("--format", choices=("tree", "json", "chrome"), default="tree")
    trace.add_argument("--hide-skipped", action="store_true", help="leave fallthrough keys out of the tree")
    trace.add_argument("-o", "--output")
    trace.set_defaults(run=command_trace)

    table = commands.add_parser("table", help="the computed dispatch table of one operator")
    table.add_argument("operator")
    table.add_argument("--keys", help="comma-separated dispatch keys (default: a useful set)")
    table.add_argument("-o", "--output")
    table.set_defaults(run=command_table)

    report = commands.add_parser("report", help="a self-contained HTML report of a backend")
    report.add_argument("--device", default="sim")
    report.add_argument("-o", "--output", default="report.html")
    report.set_defaults(run=command_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    os.environ.setdefault("SIM_FALLBACK", "silent")
    started = time.perf_counter()
    try:
        import torch

        if hasattr(torch, "sim"):
            torch.sim.set_fallback_policy(os.environ["SIM_FALLBACK"])
        arguments.run(arguments)
    except KeyboardInterrupt:
        print("explorer: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one clear line, not a traceback
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"pu1-explorer: error: {type(error).__name__}: {message}", file=sys.stderr)
        return 1
    _progress(f"done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
