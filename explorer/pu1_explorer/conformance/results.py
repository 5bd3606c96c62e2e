"""What a scorecard found: a result per probe and per swept operator, written as JSON, JUnit XML or one HTML page.

A probe carries no guide step: which step a probe grades is the guide's knowledge. The writers and the
widgets that show steps take the guide as data (`GradedStep`), label each probe "N. title" and link a probe
that did not pass to its step's page on the site (`step_page`). A result that did not pass carries a `hint`:
in one line, what usually causes that failure.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Protocol

from pu1_explorer import pages

STATUSES = ("passed", "failed", "skipped", "crashed", "timed out")
OP_STATUSES = ("passed", "mismatched", "errored", "crashed", "timed out", "skipped")
# version 1 also gave each probe a "capability" (its guide step); version 2 had no hints and no swept dtypes;
# from_json reads all three
SCHEMA_VERSION = 3
# Where the guide's pages are, seen from a page of the site's notebooks/ folder (mkdocs serves the notebook
# notebooks/guide_NN_<name>.ipynb as the folder notebooks/guide_NN_<name>/); a site's full URL works too.
GUIDE_URL = "../"


class GradedStep(Protocol):
    """The part of a guide step (`pu1_explorer.guide.GuideStep`) that the scorecard's views read.

    `number` and `title` label the step ("3. guard"), `name` identifies it, and `probes` names the scorecard
    probes (`PROBE_NAMES`) that grade it.
    """

    number: int
    name: str
    title: str
    probes: tuple[str, ...]


def probe_steps(guide: Iterable[GradedStep] | None) -> dict[str, str]:
    """Each probe's guide step as "N. title", for the probes the guide names (empty without a guide)."""
    steps: dict[str, str] = {}
    for step in guide or ():
        for probe in step.probes:
            steps.setdefault(probe, f"{step.number}. {step.title}")
    return steps


def step_page(step: GradedStep, base: str = GUIDE_URL) -> str:
    """The URL of a guide step's page: `base` + guide_NN_<name>/, the site's page of notebooks/guide_NN_<name>.ipynb."""
    return f"{base}{'' if not base or base.endswith('/') else '/'}guide_{step.number:02d}_{step.name}/"


def probe_pages(guide: Iterable[GradedStep] | None, base: str = GUIDE_URL) -> dict[str, str]:
    """Each probe's guide step page (`step_page`), for the probes the guide names (empty without a guide)."""
    pages_of: dict[str, str] = {}
    for step in guide or ():
        for probe in step.probes:
            pages_of.setdefault(probe, step_page(step, base))
    return pages_of


@dataclass
class OpResult:
    """One operator of an OpInfo sweep: its status and how many sample inputs ended each way."""

    name: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0
    dtype: str = ""  # the dtype the differential sweep ran it in ("float32"), "" for bad inputs


@dataclass
class ProbeResult:
    """One probe: its status, time, a one-line detail, counts; a sweep's operators; the output of a failed process;
    for a probe that did not pass, what usually causes that (`hint`, one line)."""

    name: str
    status: str
    seconds: float
    detail: str
    counts: dict[str, int] = field(default_factory=dict)
    ops: list[OpResult] = field(default_factory=list)
    log: str = ""
    hint: str = ""


@dataclass
class Scorecard:
    """Every probe's result for one device."""

    device: str
    torch_version: str
    started: str
    seconds: float
    probes: list[ProbeResult]
    imports: list[str] = field(default_factory=list)
    opinfo: str = "quick"

    def summary(self) -> dict[str, int]:
        """How many probes ended in each status."""
        return {status: sum(probe.status == status for probe in self.probes) for status in STATUSES}

    def probe(self, name: str) -> ProbeResult:
        """The result of the probe called `name`."""
        for result in self.probes:
            if result.name == name:
                return result
        raise KeyError(f"no probe {name!r} in this scorecard")

    def to_dict(self) -> dict:
        """Plain data (what `to_json` writes)."""
        return {"schema_version": SCHEMA_VERSION, **asdict(self), "summary": self.summary()}

    def to_json(self, indent: int | None = 1) -> str:
        """The scorecard as JSON (read it back with `Scorecard.from_json`)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Scorecard":
        """A scorecard from the text `to_json` wrote."""
        data = json.loads(text)
        fields = set(ProbeResult.__dataclass_fields__)
        op_fields = set(OpResult.__dataclass_fields__)
        probes = [ProbeResult(**{key: value for key, value in probe.items() if key in fields and key != "ops"},
                              ops=[OpResult(**{key: value for key, value in op.items() if key in op_fields})
                                   for op in probe.get("ops", [])])
                  for probe in data["probes"]]
        return cls(device=data["device"], torch_version=data["torch_version"], started=data["started"],
                   seconds=data["seconds"], probes=probes, imports=data.get("imports", []),
                   opinfo=data.get("opinfo", "quick"))

    def write(self, folder: str | Path, guide: Iterable[GradedStep] | None = None,
              guide_url: str = GUIDE_URL) -> list[Path]:
        """Write scorecard.html (see `to_html`), scorecard.xml (JUnit), scorecard.json and device_tests.json (the
        configuration of PyTorch's device-generic tests, `pu1_explorer.conformance.device_tests`) into `folder`."""
        from pu1_explorer.conformance.device_tests import write_configuration

        folder = Path(folder)
        written = []
        for name, text in (("scorecard.html", self.to_html(guide, guide_url)), ("scorecard.xml", self.to_junit_xml()),
                           ("scorecard.json", self.to_json())):
            (folder / name).write_text(text)
            written.append(folder / name)
        return written + [write_configuration(self, folder)]

    def to_junit_xml(self) -> str:
        """JUnit XML: one testsuite of capability probes, one per OpInfo sweep with a testcase per operator."""
        root = ElementTree.Element("testsuites", name=f"PrivateUse1 scorecard: {self.device}",
                                   time=f"{self.seconds:.3f}")
        suite = ElementTree.SubElement(root, "testsuite", name=f"scorecard.{self.device}", timestamp=self.started)
        suites = [suite]
        for probe in self.probes:
            case = ElementTree.SubElement(suite, "testcase", name=probe.name, classname=f"scorecard.{self.device}",
                                          time=f"{probe.seconds:.3f}")
            _junit_outcome(case, probe.status, probe.detail, probe.log)
            if probe.ops:
                sweep = ElementTree.SubElement(root, "testsuite", name=f"scorecard.{self.device}.{probe.name}",
                                               timestamp=self.started)
                for op in probe.ops:
                    op_case = ElementTree.SubElement(sweep, "testcase", name=op.name,
                                                     classname=f"scorecard.{self.device}.{probe.name}",
                                                     time=f"{op.seconds:.3f}")
                    _junit_outcome(op_case, op.status, op.detail, "")
                suites.append(sweep)
        for element in suites:
            testcases = element.findall("testcase")
            element.set("tests", str(len(testcases)))
            for kind, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                element.set(attribute, str(sum(case.find(kind) is not None for case in testcases)))
            element.set("time", f"{sum(float(case.get('time', 0)) for case in testcases):.3f}")
        ElementTree.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"

    def to_html(self, guide: Iterable[GradedStep] | None = None, guide_url: str = GUIDE_URL) -> str:
        """One self-contained page (no scripts, no network): a summary, a table coloured by status, the details.

        Each probe that did not pass says what usually causes that. With a `guide`, each probe shows the step that it
        grades ("N. title") and links to the step's page under `guide_url`; without one the step column is left out.
        """
        guide = list(guide or ())  # read twice below
        return pages.render("scorecard.html", card=self, summary=self.summary(), steps=probe_steps(guide),
                            step_pages=probe_pages(guide, guide_url), anchor=_anchor, problem_ops=problem_ops,
                            needs_action=needs_action)


def load_guide(reference: str) -> list[GradedStep]:
    """A guide named as "module:NAME" (sim's is "torch_sim:GUIDE"): its steps, each checked for the fields read."""
    from pu1_explorer.conformance.harness import resolve

    try:
        steps = list(resolve(reference))
    except (ImportError, AttributeError, ValueError, TypeError) as error:
        raise ValueError(f"guide {reference!r}: {type(error).__name__}: {error}; give module:NAME, e.g. "
                         "torch_sim:GUIDE") from None
    for step in steps:
        missing = [name for name in ("number", "name", "title", "probes") if not hasattr(step, name)]
        if missing:
            raise ValueError(f"guide {reference!r}: a step lacks {', '.join(missing)} (see GradedStep)")
    return steps


def needs_action(result: ProbeResult) -> bool:
    """Whether a probe's status asks the vendor to act: failed, crashed or timed out (not passed, not skipped)."""
    return result.status not in ("passed", "skipped")


def problem_ops(probe: ProbeResult) -> list[OpResult]:
    """The operators of a sweep that neither passed nor were skipped."""
    return [op for op in probe.ops if op.status not in ("passed", "skipped")]


def _anchor(name: str) -> str:
    """An HTML id for a probe: letters and digits, the rest as dashes."""
    return "probe-" + "".join(c if c.isalnum() else "-" for c in name.lower())


def _junit_outcome(case: ElementTree.Element, status: str, detail: str, log: str) -> None:
    """The failure, error or skipped element JUnit expects for a status."""
    if status in ("failed", "mismatched"):
        ElementTree.SubElement(case, "failure", message=detail, type=status).text = detail
    elif status in ("crashed", "timed out", "errored"):
        ElementTree.SubElement(case, "error", message=detail, type=status).text = detail
    elif status == "skipped":
        ElementTree.SubElement(case, "skipped", message=detail)
    if log:
        ElementTree.SubElement(case, "system-err").text = log
