"""Speed of the widgets: drawing a 5,000-hop trace, filtering the coverage table.

Run: `make benchmark` (or `python benchmarks/widget_speed.py` in the project's virtualenv).
"""
from __future__ import annotations


import torch
from timing import median_seconds

from pu1_explorer import trace
from pu1_explorer.widgets import CoverageExplorer
from pu1_explorer.widgets.base import figure_html
from pu1_explorer.widgets.figures import trace_figure


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    x = torch.randn(32, 64, device="sim", requires_grad=True)
    with trace("sim") as recorded:
        while len(recorded.hops) < 5000:
            torch.nn.functional.gelu(x @ x.T).sum().backward()
    recorded.hops = recorded.hops[:5000]
    draw = median_seconds(lambda: figure_html(trace_figure(recorded)))
    print(f"drawing a 5,000-hop trace (figure and its HTML): {draw:.3f} s (target <= 2 s)")

    explorer = CoverageExplorer(device="sim")

    def filter_once(text: str) -> None:
        explorer.search.value = text  # the observer filters and redraws the table

    queries = iter(["conv", "add", "", "pool", "norm", "", "mul", "", "cat", ""] * 3)
    seconds = median_seconds(lambda: filter_once(next(queries)), repeats=20)
    print(f"filtering the coverage table ({len(explorer.snapshot.rows)} rows) and redrawing it: "
          f"{seconds * 1e3:.1f} ms (target <= 200 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
