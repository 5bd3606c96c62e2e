"""A conformance scorecard for any PrivateUse1 device: each capability checked in a fresh process.

Every probe (`probes`: a function per capability) runs in a fresh, time-limited process group, forked from
a template process that has imported torch (`pu1_explorer.forkserver`: about 0.1 s a process instead of
2 s; backends load after the fork, as `import torch` would load them) as
`python -m pu1_explorer.conformance.probe_child`: it imports torch, then the modules or files named in
`imports` (for backends that `import torch` does not load by itself), then checks one capability against
the device by its name and reports one line. A probe that dies of a signal is "crashed", one that outlives
the time limit is killed with its whole process group and is "timed out", so the scorecard always returns.

Two OpInfo sweeps (`sweeps`, run by `sweep_child`) run PyTorch's `op_db` in chunks of processes: the
differential sweep compares every sample input on the device with the CPU (at test_ops.py's
`test_compare_cpu` tolerance, 1e-3), the bad-input sweep runs every `error_inputs` case and expects the
device to raise like the CPU. `opinfo="quick"` sweeps `QUICK_OPS` (and, for bad inputs, `QUICK_ERROR_OPS`:
those of them that have error inputs), `QUICK_SAMPLES` sample inputs each; `"full"` the whole `op_db`, every
sample; `"none"` neither. The two sweeps share their processes (op_db takes seconds to import); a sweep's
time is the time spent in its operators. Random and uninitialised outputs (`randn_like`, `dropout`,
`empty`, ...) are skipped: there is no value to compare.

A probe or sweep that did not pass carries a `hint`: in one line, in PyTorch's terms, what usually causes that
failure (each probe function's `@hint`, each sweep's `SWEEP_HINTS`); with the backend's guide, the pages link it
to the guide step's page. The sweeps' own dependency (expecttest, which torch's op_db imports) is a dependency of
this package; where it is missing anyway, the scorecard stops before any probe with one line saying what to
install (`MissingDependencyError`), never reporting it as the device's failure.

Besides its JSON, JUnit and HTML, a scorecard writes the configuration of PyTorch's own device-generic tests
(`device_tests`: op_allowlist, op_overrides and test_exclusions, each entry justified by a finding).

The rooms: `results` (what a scorecard found, and its JSON, JUnit and HTML), `runner` (the probes' list and
`scorecard`), `processes` (starting, reading and killing a child), `sweeps`, `probes`, `device_tests`, and the
children's side: `harness` (`compare`, `skip`, `report`, `hint` and the messages), `probe_child`, `sweep_child`.
"""
from __future__ import annotations

from pu1_explorer.conformance.harness import SWEEP_REQUIREMENTS, hint
from pu1_explorer.conformance.results import (GUIDE_URL, OP_STATUSES, STATUSES, GradedStep, OpResult, ProbeResult,
                                              Scorecard, probe_pages, probe_steps, step_page)
from pu1_explorer.conformance.runner import (OPINFO_MODES, PROBE_NAMES, PROBES, MissingDependencyError, Probe,
                                             UnknownDeviceError, preflight, scorecard)
from pu1_explorer.conformance.sweeps import QUICK_ERROR_OPS, QUICK_OPS, QUICK_SAMPLES, SWEEP_CHUNK, sweep_ops

__all__ = ["GUIDE_URL", "OPINFO_MODES", "OP_STATUSES", "PROBES", "PROBE_NAMES", "QUICK_ERROR_OPS", "QUICK_OPS",
           "QUICK_SAMPLES", "STATUSES", "SWEEP_CHUNK", "SWEEP_REQUIREMENTS", "GradedStep", "MissingDependencyError",
           "OpResult", "Probe", "ProbeResult", "Scorecard", "UnknownDeviceError", "hint", "preflight", "probe_pages",
           "probe_steps", "scorecard", "step_page", "sweep_ops"]
