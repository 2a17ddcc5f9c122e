"""Election timing (contract §3) and its rules, stated once for the CLI, the injector and admission.

Pure: no I/O. ``Timing.problems`` takes a ``describe`` function so each caller
names the values the way its user wrote them (``--lease-duration=5s``, an
annotation, an env variable, or "the default"), while the rules themselves
live only here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import defaults
from .durations import format_duration

#: ``describe(setting, seconds)`` -> how to name that value in a message.
Describe = Callable[[str, float], str]


def plain(setting: str, seconds: float) -> str:
    return f"{setting} {format_duration(seconds)}"


@dataclass(frozen=True)
class Timing:
    """Election timing, in seconds.

    ``lease_duration``: how long followers wait, after last seeing the Lease
    change, before taking it over. Longer means slower failover after a crash,
    shorter means more sensitivity to API-server hiccups.

    ``renew_deadline``: a leader that has not renewed successfully for this
    long (counted from the start of its last successful renew) stops saying it
    leads. Below ``lease_duration``, so it steps down before anyone may take over.

    ``retry_period``: how often a failed renew or acquire is retried.

    The leader renews every ``renew_deadline / 2`` (5 s by default): one write
    per interval while healthy, and time for retries before the deadline.
    """

    lease_duration: float = defaults.LEASE_DURATION
    renew_deadline: float = defaults.RENEW_DEADLINE
    retry_period: float = defaults.RETRY_PERIOD

    @property
    def renew_interval(self) -> float:
        return self.renew_deadline / 2

    def problems(self, describe: Describe = plain) -> list[str]:
        """Each broken rule as one line naming the values involved (empty when valid)."""
        lease = describe("lease-duration", self.lease_duration)
        renew = describe("renew-deadline", self.renew_deadline)
        retry = describe("retry-period", self.retry_period)
        out = []
        if not self.retry_period >= defaults.MIN_RETRY_PERIOD:
            out.append(
                f"{retry} must be at least {format_duration(defaults.MIN_RETRY_PERIOD)}: every "
                "candidate retries this often while the API server is failing"
            )
        if not self.renew_deadline > 1.2 * self.retry_period:
            out.append(f"{renew} must be greater than 1.2 × {retry}")
        if not self.lease_duration > self.renew_deadline:
            out.append(f"{lease} must be greater than {renew}")
        if self.lease_duration > defaults.MAX_DURATION:
            out.append(
                f"{lease} must be at most {format_duration(defaults.MAX_DURATION)} "
                "(longer Leases are read as garbage by every candidate)"
            )
        if self.lease_duration < 1 or self.lease_duration != int(self.lease_duration):
            out.append(
                f"{lease} must be a whole number of seconds, such as 15s or 1m "
                "(a Lease's leaseDurationSeconds is an integer)"
            )
        return out
