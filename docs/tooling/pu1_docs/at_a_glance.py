"""The landing page's pictures, made from the real dispatcher: one traced forward and backward pass on sim and sim's
operator coverage. Run as `python -m pu1_docs.at_a_glance` (the docs build forks it from the kernels' template); prints
one line of JSON: the code, both figures as HTML and the coverage figures."""
from __future__ import annotations

import json

CODE = """x = torch.randn(4, 8, device=device, requires_grad=True)
torch.nn.functional.linear(x, torch.randn(3, 8, device=device)).relu().sum().backward()"""


def main() -> None:
    """Trace `CODE` on sim, take sim's coverage, print both as JSON."""
    from pu1_explorer import coverage
    from pu1_explorer.report import coverage_figure
    from pu1_explorer.tracer import run_traced
    from pu1_explorer.widgets.base import figure_html
    from pu1_explorer.widgets.figures import trace_figure

    recorded = run_traced(CODE, "sim")
    snapshot = coverage("PrivateUse1", label="sim")
    summary, core = snapshot.summary(), snapshot.summary(core_only=True)
    title = f"One forward and backward pass on sim: {len(recorded.hops)} hops through the dispatcher"
    print(json.dumps({"code": CODE, "trace": figure_html(trace_figure(recorded, title=title)),
                      "coverage": figure_html(coverage_figure(snapshot)),
                      "operators": summary["operators"], "percent": summary["without_fallback_percent"],
                      "core_operators": core["operators"], "core_percent": core["without_fallback_percent"]}))


if __name__ == "__main__":
    main()
