"""The process of one probe: `python -m pu1_explorer.conformance.probe_child CONFIG` (CONFIG: JSON).

CONFIG holds `device`, `imports`, `uses_imports` and `target` ("module:function" or "file.py:function"); the
process imports torch and the backend, sends the probe's "hint" (what usually causes its failure), runs the probe
and sends one "result" message (`harness.emit`). With `preflight` in CONFIG it instead reports the PrivateUse1
backend's name, torch's version and the sweeps' missing dependencies.
"""
from __future__ import annotations

import json
import sys

from pu1_explorer.conformance import harness


def run_probe(config: dict) -> None:
    """Run the probe `config` names and emit its result: passed (with its report), skipped or failed."""
    try:
        harness.setup(config["device"], config["imports"], config.get("uses_imports", True))
        probe = harness.resolve(config["target"])
        harness.emit("hint", hint=harness.hint_of(probe))  # before running: a crash still leaves it
        harness.take_report()
        probe(config["device"], list(config["imports"]))
    except harness.Skipped as reason:
        harness.emit("result", status="skipped", detail=str(reason))
    except BaseException as error:
        harness.emit("result", status="failed", detail=harness.describe(error))
    else:
        detail, counts = harness.take_report() or ("passed", {})
        harness.emit("result", status="passed", detail=detail, counts=counts)


def preflight(config: dict) -> None:
    """Emit the PrivateUse1 backend's name after the imports, torch's version, whether torch.<device> exists and
    which modules the OpInfo sweeps need but cannot import."""
    try:
        torch = harness.setup(config["device"], config["imports"])
        harness.emit("preflight", name=torch.device("privateuseone").type, version=torch.__version__,
                     module=hasattr(torch, config["device"]), missing=harness.missing_requirements())
    except BaseException as error:
        harness.emit("fatal", detail=harness.describe(error))


def main(argv: list[str]) -> None:
    """Read CONFIG from the command line and run the probe or the preflight check it asks for."""
    config = json.loads(argv[0])
    (preflight if config.get("preflight") else run_probe)(config)


if __name__ == "__main__":
    main(sys.argv[1:])
