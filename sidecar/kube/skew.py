"""What the API server's ``Date`` header says about this node's wall clock.

The election never compares wall clocks across nodes, but two readers do:
grelmicro peers judge our ``renewTime`` on their own clock, and applications
compare ``valid_until`` with theirs. A node clock that is off by more than the
contract tolerates must be visible. ``Date`` has a resolution of one second
and the answer was produced somewhere between our send and our receipt, so
what we get is an interval that certainly holds the offset, not a point: an
alarm raised on it is never a false one.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime


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
    if not date:
        return None
    try:
        server = parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return None
    # The server wrote Date at some instant in [sent, received] of true time, and
    # truncated its clock to the second: its clock read in [server, server + 1).
    return ClockOffset(low=sent - (server + 1), high=received - server)
