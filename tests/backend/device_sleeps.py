"""What the tests of sim's asynchronous device share: device_sleep() keeps a stream busy on the device while the host
goes on, until the test wakes it. Each assertion that work is still pending is made before the wake, well inside the
sleep, and checks with the host's clock that it was; LONG_MS is only a bound."""
from __future__ import annotations

import time

LONG_MS = 20_000


def within(started: float, milliseconds: float) -> bool:
    """True while less than half of a sleep that started at `started` (host clock) can have passed: a stalled host
    proves nothing."""
    return (time.monotonic() - started) * 1000 < milliseconds / 2
