"""What the elector asks of its lock: the seam between the election and where it is kept.

client-go's ``resourcelock.Interface`` in spirit: read, create, replace, a
watch of what changed, and the release at shutdown. The elector decides
(``core.election``) and calls these; it does not know what is behind them: a
bare Lease, or the Lease with its hand-off and first term
(``handofflock.HandoffLock``), or a fake store in tests.

A read that finds no Lease says whether the election never had one
(``Absent.first_term``): only then may the first candidate lead at once
(contract §2, "first term"); any other absence waits a lease duration. Asking
uses the first term up, so a candidate that stands aside does not ask.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from ..core.election import Election
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.leaselock import Changed, Deleted, Failed, Healthy, Lost
from ..kube.leases import Obj

Event = Changed | Deleted | Lost | Failed | Healthy


@dataclass(frozen=True)
class Absent:
    """A read found no Lease; ``first_term``: the election never had one."""

    first_term: bool = False


class ElectionLock(Protocol):
    """One election's Lease as the elector uses it."""

    #: The Lease's name, for logs.
    name: str
    #: The longest a request may take; the elector shortens it near ``valid_until``.
    request_timeout: float

    async def read(self, timeout: float, claiming: bool = True) -> Obj | Absent:
        """The Lease as a quorum read finds it; ``claiming`` False: the candidate will not
        claim on this answer (it stands aside), so a first term is not asked for."""
        ...

    async def create(self, body: Obj, timeout: float) -> Obj:
        """Create the Lease (``Conflict``: it exists)."""
        ...

    async def replace(self, body: Obj, timeout: float) -> Obj:
        """Write over the version ``body`` carries (``Conflict``: someone wrote since)."""
        ...

    def events(self) -> AsyncIterator[Event]:
        """What happens to the Lease, for as long as the elector listens."""
        ...

    async def release(
        self,
        election: Election,
        clock: Clock,
        log: Logger,
        budget: float,
        successor: str | None = None,
    ) -> None:
        """Give up ``election``'s claim, if the Lease still holds one, within ``budget`` s;
        naming ``successor`` when given (a transfer), else whom the lock chooses."""
        ...
