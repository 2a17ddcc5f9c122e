"""What the API server's ``Date`` header says about this node's wall clock (contract §2).

``Date`` has a one-second resolution and was written between our send and our
receipt: what it proves is an interval that certainly holds the offset, so an
alarm raised on it is never a false one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

# Not email.utils.parsedate_to_datetime: the email package, in every sidecar, for one format.
_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {name: number for number, name in enumerate(_NAMES, 1)}


@dataclass(frozen=True)
class ClockOffset:
    """This node's wall clock minus the API server's, in seconds: somewhere in [low, high]."""

    low: float
    high: float

    @property
    def estimate(self) -> float:
        return (self.low + self.high) / 2

    def beyond(self, tolerance: float) -> bool:
        """Whether the clock is certainly off by more than ``tolerance`` (either way)."""
        return self.low > tolerance or self.high < -tolerance


#: Where an observer reads the last offset measured (None: none yet).
Offset = Callable[[], ClockOffset | None]


def offset_from_date(date: str | None, sent: float, received: float) -> ClockOffset | None:
    """The offset a ``Date`` header proves, given our wall-clock send and receipt times."""
    server = parse_http_date(date) if date else None
    if server is None:
        return None
    # The server wrote Date at some instant in [sent, received] of true time, and
    # truncated its clock to the second: its clock read in [server, server + 1).
    return ClockOffset(low=sent - (server + 1), high=received - server)


def parse_http_date(value: str) -> float | None:
    """Epoch seconds of an IMF-fixdate (``Mon, 23 Nov 2026 12:00:00 GMT``, RFC 9110 §5.6.7),
    the only form Go's net/http (the API server) writes; anything else is None."""
    try:
        _, day, month, year, clock, zone = value.split()
        hour, minute, second = (int(x) for x in clock.split(":"))
        when = dt.datetime(int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=dt.UTC)
    except (ValueError, KeyError):
        return None
    return when.timestamp() if zone == "GMT" else None
