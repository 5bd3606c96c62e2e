"""What torch.profiler saw of a PrivateUse1 device: host operators and the device kernels they launched.

`timeline(prof)` turns a finished `torch.profiler.profile` into plain rows, one per host
operator and one per device kernel or copy, each naming the operator that launched it, so
a figure, a test or a script can show where device time went for any PrivateUse1 backend.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch.autograd import DeviceType


@dataclass(frozen=True)
class TimelineSpan:
    track: str            # "host" (the profiling thread), "host thread <id>" or "<backend> <device index>"
    name: str             # "aten::mm" on the host, the kernel's name on the device
    start_us: float       # from the start of the profile
    end_us: float
    launched_by: str      # for a kernel, the host operator that launched it; "" on the host
    depth: int = 0        # nesting of host operators (0: called from Python)
    kind: str = "operator"  # "operator" on the host; on the device "kernel", or "copy" (a Memcpy or Memset record)


# How a driver names its copies and memsets in a profile (CUDA's "Memcpy HtoD (Pageable -> Device)", sim's alike).
COPY_PREFIXES = ("Memcpy", "Memset")


def timeline(prof, backend: str | None = None, top_level_only: bool = False) -> list[TimelineSpan]:
    """Host operators (by thread) and PrivateUse1 kernels and copies of a finished profile, in start order."""
    import torch

    backend = backend or torch.device("privateuseone").type
    spans: list[TimelineSpan] = []
    events = list(prof.events())
    operators = {event.id: event.name for event in events if event.device_type == DeviceType.CPU}
    # "host" is the thread that ran the first operator (the one that profiles); others (autograd's
    # device threads, a collective library's workers) get a track of their own.
    host_events = [event for event in events if event.device_type == DeviceType.CPU]
    main_thread = min(host_events, key=lambda event: event.time_range.start).thread if host_events else None
    for event in events:
        if event.device_type == DeviceType.PrivateUse1:
            parent = operators.get(getattr(event, "linked_correlation_id", 0), "")
            kind = "copy" if event.name.startswith(COPY_PREFIXES) else "kernel"
            spans.append(TimelineSpan(f"{backend} {event.device_index}", event.name, event.time_range.start,
                                      event.time_range.end, parent, kind=kind))
        elif event.device_type == DeviceType.CPU:
            depth = 0
            parent = event.cpu_parent
            while parent is not None:
                depth, parent = depth + 1, parent.cpu_parent
            if top_level_only and depth > 0:
                continue
            track = "host" if event.thread == main_thread else f"host thread {event.thread}"
            spans.append(TimelineSpan(track, event.name, event.time_range.start, event.time_range.end, "", depth))
    return sorted(spans, key=lambda span: (span.start_us, span.track))
