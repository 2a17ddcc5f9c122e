"""The roster's entries, read from annotation values as any writer may have left them."""

from __future__ import annotations

import datetime as dt
import json

from sidecar.core import roster

EPOCH = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.UTC)


def _notes(*items: tuple[str, str, int]) -> dict[str, str]:
    notes: dict[str, str] = {}
    for lease, identity, second in items:
        notes.update(roster.entry(lease, identity, EPOCH + dt.timedelta(seconds=second)))
    return notes


def test_entries_of_one_lease_among_many_with_names_that_prefix_each_other() -> None:
    notes = _notes(("leader-x1", "a", 1), ("leader-x10", "b", 2), ("leader-x1", "c", 3))
    notes.update(_notes(*((f"leader-y{i}", f"p{i}", i) for i in range(50))))
    assert [who for _, who, _ in roster.entries(notes, "leader-x1")] == ["a", "c"]
    assert [who for _, who, _ in roster.entries(notes, "leader-x10")] == ["b"]
    assert roster.successor(notes, "leader-x1", "c") == "a"


def test_an_entry_written_with_other_spacing_or_garbage_beside_it_is_read() -> None:
    spaced = json.dumps({"lease": "leader-x1", "identity": "a", "joined": "2026-11-27T10:00:00Z"})
    notes = {
        roster.entry_key("leader-x1", "a"): spaced,
        roster.ENTRY + "garbage": 'not json, naming "leader-x1"',  # passes the name check
        roster.ENTRY + "other": json.dumps({"lease": "leader-x2", "identity": "leader-x1"}),
        roster.ENTRY + "no-identity": json.dumps({"lease": "leader-x1"}),
    }
    assert [who for _, who, _ in roster.entries(notes, "leader-x1")] == ["a"]


def test_a_seat_is_free_while_fewer_than_seats_recent_others_are_listed() -> None:
    """Issue 38: the holder's entry, the joiner's own and entries older than ``SEAT_TTL``
    take no seat; ``SEATS`` others that joined since do."""
    lease = "leader-x"
    now = EPOCH + dt.timedelta(seconds=roster.SEAT_TTL + 100)
    recent = [(lease, f"p{i}", roster.SEAT_TTL + i) for i in range(roster.SEATS)]
    full = _notes(*recent)
    assert not roster.room(full, lease, "holder", "me", now)
    assert roster.room(full, lease, "p0", "me", now)  # the holder is never named
    assert roster.room(full, lease, "holder", "p0", now)  # its own entry is no seat
    aged = _notes(*recent[1:], (lease, "old", 50))
    assert roster.room(aged, lease, "holder", "me", now)
    assert not roster.room(_notes(*recent[1:], (lease, "new", 150)), lease, None, "me", now)
    other = _notes(*recent[1:], ("leader-y", "elsewhere", roster.SEAT_TTL + 50))
    assert roster.room(other, lease, None, "me", now)


def test_a_coordination_lease_proves_a_first_term_only_once_older_than_a_lease() -> None:
    obj = roster.new_object("ns", {})
    obj["metadata"]["creationTimestamp"] = "2026-11-27T10:00:00Z"
    assert not roster.settled(obj, EPOCH + dt.timedelta(seconds=16), 15)  # maybe 10:00:00.9
    assert roster.settled(obj, EPOCH + dt.timedelta(seconds=16.01), 15)
    assert not roster.settled(roster.new_object("ns", {}), EPOCH + dt.timedelta(days=9), 15)
