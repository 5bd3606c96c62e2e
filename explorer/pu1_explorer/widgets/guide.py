"""GuideStepper: a backend's integration guide step by step, each step checked live in fresh processes.

The guide is the backend's data (`pu1_explorer.guide.GuideStep`), e.g. sim's:

>>> import torch_sim
>>> from pu1_explorer.widgets import GuideStepper, guide_step
>>> GuideStepper(torch_sim.GUIDE, start="operators")   # all steps, Next/Back between them
>>> guide_step(torch_sim.GUIDE, "guard")                # one step's page, its check run at once
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import ipywidgets

from pu1_explorer import guide
from pu1_explorer.new_backend import EXAMPLE_DEVICE, generated_path
from pu1_explorer.pages import STATUS_COLOURS
from pu1_explorer.widgets.base import (ExplorerWidget, code_html, escape, folded_code_html, inline_code_html,
                                       inline_markdown, message_html)


def check_html(check: guide.StepCheck | None, device: str) -> str:
    """What the check did before and after the step, and how coverage moved on `device`'s keys."""
    if check is None:
        return "<p><i>Press “Run the check” to run it before and after this step, in fresh processes.</i></p>"
    mark = lambda ok: (f"<b style='color:{STATUS_COLOURS['passed']}'>works</b>" if ok  # noqa: E731
                       else f"<b style='color:{STATUS_COLOURS['failed']}'>fails</b>")
    coverage = ""
    if check.runnable_before == 0 and check.runnable_after == 0:
        coverage = (f"<p>Coverage: the {escape(device)} keys hold no kernel and no fallback yet, before or after this "
                    f"step. PyTorch's composite kernels cover {check.coverage_after}% of the overloads on paper, but "
                    f"with no kernel underneath them nothing can create or compute a {escape(device)} tensor: the "
                    "coverage moves with the step that registers operators.</p>")
    elif check.coverage_after is not None:
        changed = ", ".join(f"<code>{escape(change.operator)}</code>" for change in check.coverage_changes[:12])
        coverage = (f"<p>Coverage: {len(check.coverage_changes)} overloads change status on the {escape(device)} keys"
                    + (f" (e.g. {changed}{' …' if len(check.coverage_changes) > 12 else ''})" if changed else "")
                    + f"; {check.coverage_before}% → {check.coverage_after}% run without the fallback.</p>")
    output = "<pre style='white-space:pre-wrap;overflow-wrap:normal;word-break:normal;margin:0'>{}</pre>"
    return (f"<table><tr><th>before the step</th><td>{mark(check.before_succeeded)}</td>"
            f"<td>{output.format(escape(check.before))}</td></tr>"
            f"<tr><th>after the step</th><td>{mark(check.after_succeeded)}</td>"
            f"<td>{output.format(escape(check.after))}</td></tr></table>{coverage}")


def sources_html(step: guide.GuideStep) -> str:
    """The step's code as the backend gives it (e.g. its module, its C++ files), each file of sim with the path
    `pu1-explorer new` writes it to in a vendor's backend: a vendor starts from this very code."""
    parts = []
    for source in step.sources:
        where = f" <code>{escape(source.path)}</code>" if source.path else ""
        vendor_path = generated_path(source.path, EXAMPLE_DEVICE) if source.path else None
        if vendor_path:
            where += f" (<code>{escape(vendor_path)}</code> of <code>pu1-explorer new {EXAMPLE_DEVICE}</code>)"
        parts.append(folded_code_html(escape(source.caption) + where, source.text, source.language))
    return "".join(parts)


def driver_calls_html(step: guide.GuideStep) -> str:
    """The functions of the device driver's C API that the step's C++ calls, for a backend whose records name them
    (sim's `driver_calls`); nothing for one whose records do not, or for a step without C++."""
    calls = getattr(step, "driver_calls", None)
    if calls is None or not any(source.language == "cpp" for source in step.sources):
        return ""
    if not calls:
        return "<p>The driver: this step's C++ calls no function of the driver's C API itself.</p>"
    names = ", ".join(f"<code>{escape(name)}</code>" for name in calls)
    return f"<p>The driver calls this step's C++ makes, in the order they first appear: {names}.</p>"


def step_html(step: guide.GuideStep, check: guide.StepCheck | None, heading: bool = True) -> str:
    """One step: its title and explanation (unless the page around it says them), the check, the code."""
    intro = (f"<h3>Step {step.number}: {inline_code_html(step.title)}</h3>{inline_markdown(step.explanation)}"
             if heading else "")
    check_code = Path(step.check_program).read_text().strip()
    return (f"{intro}<h4>The check</h4>{code_html(check_code)}{check_html(check, step.bring_up.device)}"
            f"<h4>The code of this step</h4>{driver_calls_html(step)}{sources_html(step)}")


class GuideStepper(ExplorerWidget):
    """A backend's guide as steps: `GuideStepper(torch_sim.GUIDE, start="operators", run_checks=True)`; Next/Back
    move between steps, `only` keeps some of them."""

    def __init__(self, guide_steps: Sequence[guide.GuideStep], start: str | int = 1, run_checks: bool = False,
                 only: Sequence[str] | None = None) -> None:
        self.guide = tuple(guide_steps)
        if only is not None:
            for name in only:
                guide.find_step(self.guide, name)
        self.steps = [step for step in self.guide if only is None or step.name in only]
        if not self.steps:
            raise ValueError("the guide has no steps: pass a backend's guide, e.g. torch_sim.GUIDE")
        names = [step.name for step in self.steps]
        if isinstance(start, str):
            if start not in names:
                raise ValueError(f"unknown step {start!r}; the steps are: {', '.join(names)}")
            self.index = names.index(start)
        else:
            self.index = max(0, min(int(start) - 1, len(self.steps) - 1))
        self.run_checks = run_checks
        self.checks: dict[str, guide.StepCheck] = {}
        self.back = ipywidgets.Button(description="Back", icon="arrow-left")
        self.next = ipywidgets.Button(description="Next", icon="arrow-right")
        self.check_button = ipywidgets.Button(description="Run the check", button_style="primary", icon="play")
        self.progress = ipywidgets.IntProgress(min=0, max=len(self.steps), description="guide")
        self.position = ipywidgets.HTML()
        self.body = ipywidgets.HTML()
        self.back.on_click(lambda _: self.go(self.index - 1))
        self.next.on_click(lambda _: self.go(self.index + 1))
        self.check_button.on_click(lambda _: self.check())
        super().__init__([ipywidgets.HBox([self.back, self.next, self.check_button, self.progress, self.position]),
                          self.body])
        self.go(self.index)

    @property
    def step(self) -> guide.GuideStep:
        return self.steps[self.index]

    def go(self, index: int) -> None:
        self.index = max(0, min(index, len(self.steps) - 1))
        self.back.disabled = self.index == 0
        self.next.disabled = self.index == len(self.steps) - 1
        self.progress.value = self.index + 1
        self.position.value = f"step {self.index + 1} of {len(self.steps)}: <b>{escape(self.step.name)}</b>"
        if self.run_checks and self.step.name not in self.checks:
            self.check()
        self.render()

    def check(self) -> guide.StepCheck:
        self.position.value = message_html(f"running the check of {self.step.name} in fresh processes …")
        result = self.checks[self.step.name] = guide.check_step(self.guide, self.step.name)
        self.position.value = f"step {self.index + 1} of {len(self.steps)}: <b>{escape(self.step.name)}</b>"
        self.render()
        return result

    def render(self) -> None:
        self.body.value = step_html(self.step, self.checks.get(self.step.name))

    def static_html(self) -> str:
        if len(self.steps) == 1:  # a step's own page: its heading and text already say what the step is
            page = step_html(self.step, self.checks.get(self.step.name), heading=False)
            return f"<div class='explorer-widget guide'>{page}</div>"
        sections = "".join(
            f"<details{' open' if i == self.index else ''}><summary><b>Step {s.number}: "
            f"{inline_code_html(s.title)}</b></summary>{inline_markdown(s.explanation)}"
            f"{step_html(s, self.checks.get(s.name), False)}</details>" for i, s in enumerate(self.steps))
        return f"<div class='explorer-widget guide'>{sections}</div>"


def guide_step(guide_steps: Sequence[guide.GuideStep], step: str, run_checks: bool = True) -> GuideStepper:
    """One step's page of a backend's guide, its check run before and after the step:
    `guide_step(torch_sim.GUIDE, "guard")`."""
    return GuideStepper(guide_steps, start=step, only=[step], run_checks=run_checks)
