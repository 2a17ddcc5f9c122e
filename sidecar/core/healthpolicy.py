"""How the app's health moves leadership (contract §2, health): a value, checked by ``commands``.

The spirit of a kubelet probe (a period, failures and successes in a row, a
time limit per check), tuned for leadership: checks every 2 s, so an app that
fails three in a row (about 6 s) is out of the running, and a hold that lets
flapping health move leadership at most once per 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HealthPolicy:
    period: float = 2.0
    failures: int = 3
    successes: int = 2
    timeout: float = 1.0
    #: How long a leader leads before its app's health can move leadership.
    hold: float = 30.0
    #: An unhealthy leader with no other candidate listed: "keep" leading, or "nobody".
    when_none: str = "keep"
