"""The sim backend's honest gap against PyTorch's OpInfo database: the ONE place for it.

`GAPS` maps an OpInfo's full name (name plus variant, e.g. "div.floor_rounding")
to a one-line reason. An entry whose reason starts with "skip:" is skipped (it
crashes, hangs, or is random); every other entry is an expected failure (it fails
deterministically, and the day it passes the test reports an unexpected success
so the entry gets removed).

`SHAPES_ONLY` maps the OpInfos whose outputs are random draws that sim and CPU do not
share to the reason; for those the test compares shapes, dtypes and finiteness
instead of values. They count as passing, and are listed here so that the weaker
check is visible in the same file.
"""
from __future__ import annotations

GAPS: dict[str, str] = {}

SHAPES_ONLY: dict[str, str] = {}


def is_skip(reason: str) -> bool:
    return reason.startswith("skip:")
