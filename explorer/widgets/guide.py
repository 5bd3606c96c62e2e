"""GuideStepper: the integration guide step by step, each step checked live in fresh processes."""
from __future__ import annotations

import ipywidgets

from pu1_explorer import guide
from pu1_explorer.widgets.base import (ExplorerWidget, code_html, escape, folded_code_html, inline_code_html,
                                       inline_markdown, message_html)


def check_html(check: guide.StepCheck | None) -> str:
    if check is None:
        return "<p><i>Press “Run the check” to run it before and after this step, in fresh processes.</i></p>"
    mark = lambda ok: ("<b style='color:#2e7d32'>works</b>" if ok  # noqa: E731
                       else "<b style='color:#c62828'>fails</b>")
    coverage = ""
    if check.coverage_after is not None:
        changed = ", ".join(f"<code>{escape(change.operator)}</code>" for change in check.coverage_changes[:12])
        coverage = (f"<p>Coverage: {len(check.coverage_changes)} overloads change status on the sim keys"
                    + (f" (e.g. {changed}{' …' if len(check.coverage_changes) > 12 else ''})" if changed else "")
                    + f"; {check.coverage_before}% → {check.coverage_after}% run without the fallback.</p>")
    output = "<pre style='white-space:pre-wrap;overflow-wrap:normal;word-break:normal;margin:0'>{}</pre>"
    return (f"<table><tr><th>before the step</th><td>{mark(check.before_succeeded)}</td>"
            f"<td>{output.format(escape(check.before))}</td></tr>"
            f"<tr><th>after the step</th><td>{mark(check.after_succeeded)}</td>"
            f"<td>{output.format(escape(check.after))}</td></tr></table>{coverage}")


def sources_html(step: guide.GuideStep) -> str:
    """The step's real code: sim's Python module and C++ file, then the C++ skeleton a vendor starts from."""
    parts = [folded_code_html(f"sim's Python module <code>{escape(step.module_path)}</code>", step.source)]
    if step.cpp_source is not None:
        parts.append(folded_code_html(f"sim's C++ file <code>{escape(step.cpp_file)}</code>", step.cpp_source, "cpp"))
    parts.append(folded_code_html("The C++ a vendor writes for this step, in short", step.vendor_cpp, "cpp"))
    return "".join(parts)


def step_html(step: guide.GuideStep, check: guide.StepCheck | None, heading: bool = True) -> str:
    """One step: its title and explanation (unless the page around it says them), the check, the code."""
    intro = (f"<h3>Step {step.number}: {inline_code_html(step.title)}</h3>{inline_markdown(step.explanation)}"
             if heading else "")
    return (f"{intro}<h4>The check</h4>{code_html(step.check_code)}{check_html(check)}"
            f"<h4>The code of this step</h4>{sources_html(step)}")


class GuideStepper(ExplorerWidget):
    """The guide as steps: `GuideStepper(start="operators", run_checks=True)`; Next/Back move between steps."""

    def __init__(self, start: str | int = 1, run_checks: bool = False, only: list[str] | None = None) -> None:
        self.steps = [step for step in guide.steps() if only is None or step.name in only]
        if not self.steps:
            raise ValueError(f"no such steps: {only}")
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
        result = self.checks[self.step.name] = guide.check_step(self.step.name)
        self.position.value = f"step {self.index + 1} of {len(self.steps)}: <b>{escape(self.step.name)}</b>"
        self.render()
        return result

    def render(self) -> None:
        self.body.value = step_html(self.step, self.checks.get(self.step.name))

    def static_html(self) -> str:
        if len(self.steps) == 1:  # a step's own page: its heading and text already say what the step is
            return f"<div class='explorer-widget guide'>{step_html(self.step, self.checks.get(self.step.name), False)}</div>"
        sections = "".join(
            f"<details{' open' if i == self.index else ''}><summary><b>Step {s.number}: "
            f"{inline_code_html(s.title)}</b></summary>{inline_markdown(s.explanation)}"
            f"{step_html(s, self.checks.get(s.name), False)}</details>" for i, s in enumerate(self.steps))
        return f"<div class='explorer-widget guide'>{sections}</div>"
