"""The two clocks every decision and every stamp comes from, as one value that tests replace."""

from __future__ import annotations

import datetime as dt
import time


class Clock:
    """Monotonic for every decision (node clocks disagree), wall for what is written."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)
