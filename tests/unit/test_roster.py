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
