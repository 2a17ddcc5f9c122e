"""What the election state machine asks its driver to do next (``Election.next_action``).

One of three, and nothing else: read the Lease, write it, or wait. The driver
does it and reports back; the state machine never does I/O of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Read:
    """Fetch the Lease (the record is unknown or stale)."""


@dataclass(frozen=True)
class Write:
    """Create or replace the Lease with ``body`` (it carries the resourceVersion read)."""

    body: dict[str, Any]
    create: bool
    purpose: Literal["acquire", "renew"]


@dataclass(frozen=True)
class Wait:
    """Nothing to do before ``until`` (monotonic), unless the watch brings news."""

    until: float


Action = Read | Write | Wait
