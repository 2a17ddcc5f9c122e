"""What the application is told (contract §4): one typed value for state.json, /leader and /status.

``State.of`` reads it off the election at one instant; the state file, the
HTTP endpoints and docs/application.md's example all show ``as_dict()``, so they cannot
disagree on a field.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .election import Election
from .lease import format_microtime


@dataclass(frozen=True)
class State:
    election: str
    namespace: str
    lease: str
    identity: str
    is_leader: bool
    holder: str | None
    fencing_token: int | None
    acquired_at: str | None
    renewed_at: str | None
    valid_until: str | None
    updated_at: str

    @classmethod
    def of(cls, election: Election, name: str, now: float, now_wall: dt.datetime) -> State:
        """The state of ``election`` (named ``name``) at monotonic ``now``, written at ``now_wall``."""
        leading = election.is_leader(now)
        record = election.record
        return cls(
            election=name,
            namespace=election.namespace,
            lease=election.lease,
            identity=election.identity,
            is_leader=leading,
            holder=record.holder if record is not None else None,
            fencing_token=election.fencing_token if leading else None,
            acquired_at=_iso(record.acquire_time) if record is not None else None,
            renewed_at=_iso(record.renew_time) if record is not None else None,
            valid_until=_iso(election.vouched_until(now)),
            updated_at=format_microtime(now_wall),
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields in order; all are str, int, bool or None, so a shallow copy (not
        ``dataclasses.asdict``'s deep one, which every published state paid several times)."""
        return dict(vars(self))

    def comparable(self) -> dict[str, Any]:
        """All but ``updated_at`` and ``renewed_at``: what makes a new version (contract §4).

        A renew a follower sees is none (issue 28 item 3); a leader's moves ``valid_until``."""
        fields = self.as_dict()
        del fields["updated_at"], fields["renewed_at"]
        return fields


def _iso(when: dt.datetime | None) -> str | None:
    return format_microtime(when) if when is not None else None
