"""What a scorecard found: a result per probe and per swept operator, written as JSON, JUnit XML or one HTML page.

A probe carries no guide step: which step a probe grades is the guide's knowledge. The writers and the
widgets that show steps take the guide as data (`GradedStep`) and label each probe "N. title".
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from typing import Iterable, Protocol

from pu1_explorer import pages

STATUSES = ("passed", "failed", "skipped", "crashed", "timed out")
OP_STATUSES = ("passed", "mismatched", "errored", "crashed", "timed out", "skipped")
SCHEMA_VERSION = 2  # version 1 also gave each probe a "capability" (its guide step); from_json reads both


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


@dataclass
class OpResult:
    """One operator of an OpInfo sweep: its status and how many sample inputs ended each way."""

    name: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0


@dataclass
class ProbeResult:
    """One probe: its status, time, a one-line detail, counts; a sweep's operators; the output of a failed process."""

    name: str
    status: str
    seconds: float
    detail: str
    counts: dict[str, int] = field(default_factory=dict)
    ops: list[OpResult] = field(default_factory=list)
    log: str = ""


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
        probes = [ProbeResult(**{key: value for key, value in probe.items() if key in fields and key != "ops"},
                              ops=[OpResult(**op) for op in probe.get("ops", [])])
                  for probe in data["probes"]]
        return cls(device=data["device"], torch_version=data["torch_version"], started=data["started"],
                   seconds=data["seconds"], probes=probes, imports=data.get("imports", []),
                   opinfo=data.get("opinfo", "quick"))

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

    def to_html(self, guide: Iterable[GradedStep] | None = None) -> str:
        """One self-contained page (no scripts, no network): a summary, a table coloured by status, the details.

        With a `guide`, each probe shows the step that it grades ("N. title"); without one the step column is left out.
        """
        return pages.render("scorecard.html", card=self, summary=self.summary(), steps=probe_steps(guide),
                            anchor=_anchor, problem_ops=problem_ops)


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
