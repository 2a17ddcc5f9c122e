"""What the API server's ``Date`` header says about this node's wall clock (contract §2).

Grelmicro peers judge our ``renewTime``, and applications ``valid_until``, on
their own clocks, so a node clock off by more than the contract tolerates must
be visible. ``Date`` has a one-second resolution and was written between our
send and our receipt: what we get is an interval that certainly holds the
offset, so an alarm raised on it is never a false one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

# Not email.utils.parsedate_to_datetime: it pulls much of the email package into every
# sidecar to read one fixed format (contract §1, "Footprint").
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


def offset_from_date(date: str | None, sent: float, received: float) -> ClockOffset | None:
    """The offset a ``Date`` header proves, given our wall-clock send and receipt times."""
    server = parse_http_date(date) if date else None
    if server is None:
        return None
    # The server wrote Date at some instant in [sent, received] of true time, and
    # truncated its clock to the second: its clock read in [server, server + 1).
    return ClockOffset(low=sent - (server + 1), high=received - server)


def parse_http_date(value: str) -> float | None:
    """Epoch seconds of an IMF-fixdate (``Mon, 23 Nov 2026 12:00:00 GMT``, RFC 9110 §5.6.7).

    The one form an HTTP server must send, and the only one Go's net/http (the API
    server) writes; anything else is None (the offset stays unknown).
    """
    parts = value.split()
    if len(parts) != 6 or parts[5] != "GMT" or parts[2] not in _MONTHS:
        return None
    try:
        hour, minute, second = (int(x) for x in parts[4].split(":"))
        when = dt.datetime(
            int(parts[3]), _MONTHS[parts[2]], int(parts[1]), hour, minute, second, tzinfo=dt.UTC
        )
    except ValueError:
        return None
    return when.timestamp()
