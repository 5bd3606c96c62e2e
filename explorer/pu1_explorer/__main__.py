"""Command line: `python -m pu1_explorer coverage|demand|next-kernels|trace|table|report|scorecard|sanitize|new ...`;
see `--help`."""
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
    from pu1_explorer.devices import backend_key

    return backend_key(device)


def check_output(output: str | None) -> None:
    """Refuse an output path whose folder is missing or not writable, before any work is done."""
    if not output:
        return
    path = Path(output)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise IsADirectoryError(f"-o {output}: is a folder; give a file name")
    if not folder.is_dir():
        raise FileNotFoundError(f"-o {output}: the folder {str(folder)!r} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise PermissionError(f"-o {output}: the folder {str(folder)!r} is not writable")


def _write(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text)
        _progress(f"wrote {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def command_coverage(arguments: argparse.Namespace) -> None:
    from pu1_explorer.op_coverage import coverage

    if arguments.against and arguments.namespace != "aten":
        raise ValueError(f"--against compares ATen kernels; it does not take --namespace {arguments.namespace}")
    _progress(f"classifying every {arguments.namespace} overload for {arguments.device}")
    snapshot = coverage(_backend_key(arguments.device), label=arguments.device, namespace=arguments.namespace)
    if arguments.against:
        from pu1_explorer.baselines import against

        _progress(f"reading {arguments.against}'s kernels from torch's native_functions.yaml")
        report = against(snapshot, arguments.against)
        text = {"json": report.to_json, "csv": lambda: report.to_csv(core_only=arguments.core),
                "md": lambda: report.to_markdown(core_only=arguments.core)}[arguments.format]()
        _write(text, arguments.output)
        return
    if arguments.format == "json":
        text = snapshot.to_json()
    elif arguments.format == "csv":
        text = snapshot.to_csv() if not arguments.core else _core_csv(snapshot)
    else:
        text = snapshot.to_markdown(core_only=arguments.core)
    _write(text, arguments.output)


def command_demand(arguments: argparse.Namespace) -> None:
    """Measure which overloads the zoo's models (and the given workload scripts) reach on the device."""
    from pu1_explorer.demand import measure
    from pu1_explorer.zoo import zoo_model

    for name in arguments.models or []:
        zoo_model(name)
    command = "pu1-explorer " + " ".join(arguments.argv)
    _progress(f"running the zoo{' and ' + str(len(arguments.workloads)) + ' workload(s)' if arguments.workloads else ''}"
              f" on {arguments.device} under the operator counter")
    demand = measure(arguments.device, arguments.models, arguments.workloads, zoo=not arguments.no_zoo,
                     command=command.strip(), progress=_progress)
    _write(demand.to_json() if arguments.format == "json" else demand.to_markdown(), arguments.output)


def command_next_kernels(arguments: argparse.Namespace) -> None:
    """The device's missing kernels, ranked by the demand of the zoo and of the given workload scripts."""
    from pu1_explorer.demand import check_top, demand_from_json, measure_script, next_kernels, shipped
    from pu1_explorer.op_coverage import coverage

    check_top(arguments.top)
    if arguments.demand:
        if not Path(arguments.demand).is_file():
            raise FileNotFoundError(f"--demand {arguments.demand}: no such file")
        demand = demand_from_json(Path(arguments.demand).read_text(), arguments.demand)
    else:
        demand = shipped()
    if arguments.workloads:
        _progress(f"measuring {len(arguments.workloads)} workload(s) on {arguments.device}")
        demand = demand.with_runs(measure_script(path, arguments.device) for path in arguments.workloads)
    _progress(f"classifying every ATen overload for {arguments.device}")
    snapshot = coverage(_backend_key(arguments.device), label=arguments.device)
    ranked = next_kernels(snapshot, demand, arguments.top)
    text = {"md": ranked.to_markdown, "csv": ranked.to_csv, "json": ranked.to_json}[arguments.format]()
    _write(text, arguments.output)


def check_workload_files(paths: list[str]) -> None:
    """Refuse a workload that is not an existing .py file before anything runs."""
    for path in paths:
        if not path.endswith(".py") or not Path(path).is_file():
            raise FileNotFoundError(f"--workload {path}: no such .py file; give a script that runs your model on "
                                    "`device`")


def _core_csv(snapshot) -> str:
    lines = snapshot.to_csv().splitlines()
    core = {row.operator for row in snapshot.rows if row.core}
    return "\n".join([lines[0]] + [line for line in lines[1:] if line.split(",")[0] in core]) + "\n"


def command_trace_interfaces(arguments: argparse.Namespace) -> None:
    """`trace --interfaces`: the backend's interface calls under each user line and operator, with the hops."""
    from pu1_explorer.interface_trace import trace_call_path

    if arguments.format == "chrome":
        raise ValueError("--interfaces prints a tree or JSON; --format chrome is for the dispatcher's hops alone")
    if arguments.target.endswith(".py") and not Path(arguments.target).is_file():
        raise FileNotFoundError(f"no such script: {arguments.target}")
    code = Path(arguments.target).read_text() if Path(arguments.target).is_file() else arguments.target
    _progress(f"tracing the interface calls and hops on {arguments.device}")
    path = trace_call_path(code, device=arguments.device)
    _progress(f"{len(path.calls())} interface calls recorded")
    if arguments.format == "json":
        text = path.to_json(indent=1)
    else:
        hops = path.dispatch.to_text(show_skipped=not arguments.hide_skipped) if path.dispatch else ""
        text = f"{path.to_text()}\n\ndispatcher hops:\n{hops}"
    _write(text, arguments.output)


def command_trace(arguments: argparse.Namespace) -> None:
    import torch

    from pu1_explorer.tracer import trace

    if arguments.interfaces:
        return command_trace_interfaces(arguments)
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
    from pu1_explorer.dispatch_tables import dispatch_table

    keys = arguments.keys.split(",") if arguments.keys else None
    rows = dispatch_table(arguments.operator, keys)
    width = max(len(entry.key) for entry in rows)
    _write("\n".join(f"{entry.key:{width}s}  {entry.kind:32s}  {entry.provenance}" for entry in rows),
           arguments.output)


def command_report(arguments: argparse.Namespace) -> None:
    from pu1_explorer.op_coverage import coverage, observe
    from pu1_explorer.report import build_report, run_workloads

    key = _backend_key(arguments.device)
    names = arguments.workload or None
    _progress(f"[1/3] classifying every ATen overload for {arguments.device}")
    snapshot = coverage(key, label=arguments.device)
    _progress("[2/3] running the workloads under the fallback monitor")
    fallbacks, results = run_workloads(arguments.device, names, steps=arguments.steps, progress=_progress)
    _progress("[3/3] writing the page")
    page = build_report(observe(snapshot, fallbacks), fallbacks, results, progress=_progress)
    Path(arguments.output).write_text(page)
    _progress(f"wrote {arguments.output} ({len(page) / 1e6:.1f} MB, self-contained)")
    failed = [result for result in results if result.error]
    if failed:  # a finding about the device, shown on the page; the command itself did its job
        _progress(f"warning: {len(failed)} of {len(results)} workload(s) failed on {arguments.device}: "
                  + "; ".join(f"{result.name}: {result.error}" for result in failed))


def command_scorecard(arguments: argparse.Namespace) -> None:
    """Write scorecard.html, scorecard.xml, scorecard.json and device_tests.json for a PrivateUse1 device into the
    output folder."""
    import torch

    from pu1_explorer.conformance import PROBE_NAMES, scorecard
    from pu1_explorer.conformance.results import load_guide

    folder = Path(arguments.folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"-o {arguments.folder}: no such folder; create it first")
    if not os.access(folder, os.W_OK):
        raise PermissionError(f"-o {arguments.folder}: the folder is not writable")
    device = torch.device(arguments.device).type
    if device != torch.device("privateuseone").type:
        raise ValueError(f"--device {arguments.device}: a scorecard is for the PrivateUse1 backend "
                         f"({torch.device('privateuseone').type!r}), not {device!r}")
    unknown = [name for name in arguments.probes or [] if name not in PROBE_NAMES]
    if unknown:
        raise ValueError(f"--probe {unknown[0]!r}: unknown; the probes are {', '.join(PROBE_NAMES)}")
    if arguments.jobs < 1 or arguments.timeout <= 0:
        raise ValueError("--jobs must be at least 1 and --timeout positive")
    guide = load_guide(arguments.guide) if arguments.guide else None
    card = scorecard(device, arguments.imports, timeout=arguments.timeout, jobs=arguments.jobs,
                     opinfo=arguments.opinfo, progress=_progress, probes=arguments.probes)
    written = card.write(folder, guide, arguments.guide_url)
    counts = ", ".join(f"{count} {status}" for status, count in card.summary().items() if count)
    _progress(f"{device}: {counts}; wrote {', '.join(path.name for path in written)} into {folder}")


def command_sanitize(arguments: argparse.Namespace) -> int:
    """Run a script under the stream sanitizer; exit status 1 with the report when it finds a race."""
    from pu1_explorer.sanitizer import sanitize_script

    _progress(f"running {arguments.script} on {arguments.device} under the stream sanitizer")
    report = sanitize_script(arguments.script, arguments.device)
    text = json.dumps(report.to_dict(), indent=1) if arguments.format == "json" else report.to_text()
    _write(text, arguments.output)
    return 1 if report.races or report.error else 0


def command_new(arguments: argparse.Namespace) -> None:
    """Write a new out-of-tree PrivateUse1 backend for device NAME: sim's driver and integration, renamed."""
    from pu1_explorer.new_backend import new_backend

    folder = new_backend(arguments.name, arguments.folder)
    _progress(f"wrote the {arguments.name} backend into {folder}; build it with "
              f"`pip install --no-build-isolation {folder}`")


DEVICE_HELP = "the device: the PrivateUse1 backend's name (the default: the loaded backend), cpu or meta"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pu1-explorer",
                                     description="See what PyTorch's dispatcher does for a backend.")
    commands = parser.add_subparsers(dest="command", required=True)
    backend = argparse.ArgumentParser(add_help=False)
    backend.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE_OR_FILE",
                         help="import a backend that does not autoload first (a module name or a .py file; repeatable)")

    coverage = commands.add_parser("coverage", help="operator coverage of a backend", parents=[backend])
    coverage.add_argument("--device", help=DEVICE_HELP)
    coverage.add_argument("--core", action="store_true", help="only the core-ATen overloads")
    coverage.add_argument("--namespace", choices=("aten", "c10d"), default="aten",
                          help="the operators to classify: ATen's, or c10d's collectives")
    coverage.add_argument("--against", choices=("cuda", "cpu", "mps"),
                          help="only the overloads this device of PyTorch's has a kernel for (from torch's "
                               "native_functions.yaml), each with what the backend does with it")
    coverage.add_argument("--format", choices=("md", "csv", "json"), default="md")
    coverage.add_argument("-o", "--output")
    coverage.set_defaults(run=command_coverage)

    workload_help = ("a .py script that runs your model once on the device named by its global `device` "
                     "(repeatable); its operators join the ranking")
    demand = commands.add_parser("demand", parents=[backend],
                                 help="measure which ATen overloads real models reach on a device (the zoo: "
                                      "transformers models and torch.nn layers; with your scripts)")
    demand.add_argument("--device", help=DEVICE_HELP)
    demand.add_argument("--model", dest="models", action="append", metavar="NAME",
                        help="only this zoo model (repeatable; default: all of them)")
    demand.add_argument("--no-zoo", action="store_true", help="only the --workload scripts")
    demand.add_argument("--workload", dest="workloads", action="append", default=[], metavar="FILE",
                        help=workload_help)
    demand.add_argument("--format", choices=("json", "md"), default="json")
    demand.add_argument("-o", "--output")
    demand.set_defaults(run=command_demand)

    next_kernels = commands.add_parser("next-kernels", parents=[backend],
                                       help="the kernels a backend lacks, ranked by how many real models need them")
    next_kernels.add_argument("--device", help=DEVICE_HELP)
    next_kernels.add_argument("--top", type=int, default=20, metavar="N", help="how many to list (default 20)")
    next_kernels.add_argument("--workload", dest="workloads", action="append", default=[], metavar="FILE",
                              help=workload_help)
    next_kernels.add_argument("--demand", metavar="FILE",
                              help="demand data written by `pu1-explorer demand` (default: the zoo's, shipped)")
    next_kernels.add_argument("--format", choices=("md", "csv", "json"), default="md")
    next_kernels.add_argument("-o", "--output")
    next_kernels.set_defaults(run=command_next_kernels)

    trace = commands.add_parser("trace", help="trace the dispatcher hops of a script or an expression",
                                parents=[backend])
    trace.add_argument("target", help="a .py file, or Python statements (`device` holds --device)")
    trace.add_argument("--device", help=DEVICE_HELP)
    trace.add_argument("--format", choices=("tree", "json", "chrome"), default="tree")
    trace.add_argument("--hide-skipped", action="store_true", help="leave fallthrough keys out of the tree")
    trace.add_argument("--interfaces", action="store_true",
                       help="also record the backend's interface calls (hooks, guard, allocator, ...) per user line "
                            "and operator (the backend must offer start/stop_interface_trace)")
    trace.add_argument("-o", "--output")
    trace.set_defaults(run=command_trace)

    table = commands.add_parser("table", help="the computed dispatch table of one operator", parents=[backend])
    table.add_argument("operator")
    table.add_argument("--keys", help="comma-separated dispatch keys (default: a useful set)")
    table.add_argument("-o", "--output")
    table.set_defaults(run=command_table)

    report = commands.add_parser("report", help="a self-contained HTML report of a backend", parents=[backend])
    report.add_argument("--device", help=DEVICE_HELP)
    report.add_argument("--workload", action="append", metavar="NAME_OR_FILE",
                        help="a reference workload (mlp, cnn, transformer) or a .py file that uses `device`; "
                             "repeatable (default: the three reference workloads)")
    report.add_argument("--steps", type=int, default=2, help="training steps per reference workload (default 2)")
    report.add_argument("-o", "--output", default="report.html")
    report.set_defaults(run=command_report)

    scorecard = commands.add_parser("scorecard", parents=[backend],
                                    help="a conformance scorecard of a PrivateUse1 device: HTML, JUnit XML, JSON")
    scorecard.add_argument("--device", help="the PrivateUse1 backend's name (the default: the loaded backend)")
    scorecard.add_argument("-o", "--output-folder", dest="folder", default=".", metavar="FOLDER",
                           help="where scorecard.html, scorecard.xml, scorecard.json and device_tests.json (the "
                                "configuration of PyTorch's device-generic tests) go (default: .)")
    scorecard.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds per probe process")
    scorecard.add_argument("--jobs", type=int, default=2, metavar="N", help="probe processes at a time")
    scorecard.add_argument("--opinfo", choices=("quick", "full", "none"), default="quick",
                           help="the OpInfo sweeps: a fixed subset of ops (quick), all of op_db (full), none")
    scorecard.add_argument("--guide", metavar="MODULE:NAME",
                           help="the backend's guide (e.g. torch_sim:GUIDE): each probe is linked to its step's page")
    scorecard.add_argument("--guide-url", default="../", metavar="URL",
                           help="where the guide's pages are (default ../: from a page of the site's notebooks/)")
    scorecard.add_argument("--probe", dest="probes", action="append", metavar="NAME",
                           help="run only this probe (repeatable; default: all)")
    scorecard.set_defaults(run=command_scorecard)

    sanitize = commands.add_parser("sanitize", parents=[backend],
                                   help="run a script and report accesses between the device's streams that nothing "
                                        "orders (exit status 1 when there is one)")
    sanitize.add_argument("script", help="a .py file (`device` holds --device)")
    sanitize.add_argument("--device", help="the PrivateUse1 backend's name (the default: the loaded backend)")
    sanitize.add_argument("--format", choices=("text", "json"), default="text")
    sanitize.add_argument("-o", "--output")
    sanitize.set_defaults(run=command_sanitize)

    new = commands.add_parser("new", help="create the project of a new out-of-tree PrivateUse1 backend")
    new.add_argument("name", help="the device's name: lowercase letters and underscores, not a name torch uses already")
    new.add_argument("-o", "--output-folder", dest="folder", metavar="FOLDER",
                     help="a new or empty folder (default: ./torch_NAME)")
    new.set_defaults(run=command_new)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    arguments.argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("SIM_FALLBACK", "silent")
    started = time.perf_counter()
    try:
        check_output(getattr(arguments, "output", None))
        if getattr(arguments, "workload", None):
            from pu1_explorer.report import check_workloads

            check_workloads(arguments.workload)
        check_workload_files(getattr(arguments, "workloads", []))
        if getattr(arguments, "no_zoo", False) and not arguments.workloads:
            raise ValueError("--no-zoo measures only --workload scripts: give at least one")
        import torch

        from pu1_explorer.devices import check_device, import_backends

        import_backends(getattr(arguments, "imports", []))
        if hasattr(arguments, "device"):
            arguments.device = check_device(arguments.device)
        if hasattr(torch, "sim") and hasattr(torch.sim, "set_fallback_policy"):
            torch.sim.set_fallback_policy(os.environ["SIM_FALLBACK"])
        status = arguments.run(arguments) or 0
    except KeyboardInterrupt:
        print("explorer: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one clear line, not a traceback
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"pu1-explorer: error: {type(error).__name__}: {message}", file=sys.stderr)
        return 1
    _progress(f"done in {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
