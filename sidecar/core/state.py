"""What the application is told (contract §4): one typed value for state.json, /leader and /status.

A value, with no knowledge of the election: ``View.of`` (``driver.observer``)
reads it off the election at one instant. The state file, the HTTP endpoints
and docs/application.md's example all show ``as_dict()``, so they cannot
disagree on a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    #: The end of the last term under way (contract §4, the drain): its ``token``, the
    #: ``until`` it may be acted on and the ``reason``; the app may acknowledge it sooner.
    drain: dict[str, Any] | None = None
    #: A sharded election (contract §4, shards): every shard, with its owner, and this pod's
    #: token and ``valid_until`` for those it owns; ``is_leader`` then says "owns any".
    #: Absent from ``as_dict`` for a plain election, whose state stays as it was.
    shards: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields in order; all are str, int, bool or None (``shards``: a list of such
        dicts), so a shallow copy (not ``dataclasses.asdict``'s deep one, which every
        published state paid several times)."""
        fields = dict(vars(self))
        if self.shards is None:
            del fields["shards"]
        return fields

    def comparable(self) -> dict[str, Any]:
        """All but ``updated_at`` and ``renewed_at``: what makes a new version (contract §4).

        A renew a follower sees is none (issue 28 item 3); a leader's moves ``valid_until``."""
        fields = self.as_dict()
        del fields["updated_at"], fields["renewed_at"]
        return fields
