"""What the deferrable sensors share: how they hand the wait to the triggerer."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

# The task's own timeout lies this far past the trigger's deadline, so that the trigger, which
# knows why it is still waiting, is the one that reports it.
DEADLINE_MARGIN_SECONDS = 300


def defer_until(sensor: Any, make_trigger: Callable[[float], Any], seconds: float, **kwargs: Any) -> None:
    """Defer `sensor` to the trigger `make_trigger(deadline)` (epoch seconds, `seconds` from now);
    the triggerer resumes it in `execute_complete(context, event, **kwargs)`."""
    deadline = time.time() + float(seconds)
    sensor.defer(
        trigger=make_trigger(deadline),
        method_name="execute_complete",
        kwargs=kwargs or None,
        timeout=timedelta(seconds=float(seconds) + DEADLINE_MARGIN_SECONDS),
    )
