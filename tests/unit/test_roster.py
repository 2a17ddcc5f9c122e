"""The roster's entries, read from annotation values as any writer may have left them."""

from __future__ import annotations

import datetime as dt
import json

from sidecar.core import roster
from sidecar.core.defaults import MAX_DURATION

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


# ---- marks: bounded by tidying, never taken out while they may matter (issue 38) ----


def _apply(notes: dict[str, str], patch: dict[str, str | None]) -> None:
    for key, value in patch.items():
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value


def test_a_tidy_marks_present_leases_live_turns_absent_ones_gone_and_drops_old_gone_ones() -> None:
    swept = EPOCH + dt.timedelta(seconds=roster.MARK_GRACE)  # marks this old may turn gone
    later = swept + dt.timedelta(seconds=15 + roster.GONE_MARGIN + 1)
    notes = {
        **roster.mark("leader-live", EPOCH, 15),
        **roster.mark("leader-swept", EPOCH, 15),
        **roster.mark("leader-back", EPOCH, 15),
        roster.MARK + "garbage": "not json",
    }
    _apply(notes, roster.tidied(notes, {"leader-live": 15}, swept))
    assert roster.live(notes, "leader-live")
    for lease in ("leader-swept", "leader-back"):  # gone, and still a mark: a candidate waits
        assert roster.marked(notes, lease) and not roster.live(notes, lease)
    assert notes[roster.MARK + "garbage"] == "not json"
    present = {"leader-live": 15, "leader-back": 15, "leader-new": 30}
    almost = later - dt.timedelta(seconds=2)
    _apply(notes, roster.tidied(notes, present, almost))
    assert roster.live(notes, "leader-back") and roster.live(notes, "leader-new")
    assert roster.marked(notes, "leader-swept")  # absent, but not yet for long enough
    _apply(notes, roster.tidied(notes, present, later))
    assert not roster.marked(notes, "leader-swept")
    assert all(roster.live(notes, lease) for lease in present)
    assert roster.tidied(notes, present, later) == {}


def test_a_gone_mark_of_unknown_duration_stays_a_day_and_no_bigger_than_the_live_one() -> None:
    """Marks written before marks had a duration: their lease duration may be up to a day."""
    old = roster.mark("leader-x", EPOCH)  # as sidecars before issue 38 wrote them
    live = roster.mark("leader-y", EPOCH, 15)
    swept = EPOCH + dt.timedelta(seconds=roster.MARK_GRACE)
    for notes in (old, live):
        gone = roster.tidied(notes, {}, swept)
        assert all(len(gone[k] or "") <= len(notes[k]) for k in notes), (notes, gone)
        _apply(notes, gone)
    day = dt.timedelta(seconds=MAX_DURATION + roster.GONE_MARGIN)
    assert roster.tidied(old, {}, swept + day) == {}
    assert roster.tidied(old, {}, swept + day + dt.timedelta(seconds=1)) == dict.fromkeys(old)


def test_a_tidy_leaves_a_young_live_mark_live_though_its_lease_is_absent() -> None:
    """Issue 38: its candidate may be between writing the mark and creating the Lease, so a
    tidy that listed before the create must not turn it gone; that candidate then needs no
    read or write after its create (``FirstTermMark``). Young is younger than
    ``MARK_GRACE`` by its stamp; a stamp further ahead than ``GONE_MARGIN`` is no stamp."""
    notes = roster.mark("leader-new", EPOCH, 15)
    assert roster.tidied(notes, {}, EPOCH + dt.timedelta(seconds=roster.MARK_GRACE - 1)) == {}
    assert roster.tidied(notes, {}, EPOCH - dt.timedelta(seconds=roster.GONE_MARGIN)) == {}
    _apply(notes, roster.tidied(notes, {}, EPOCH + dt.timedelta(seconds=roster.MARK_GRACE)))
    assert roster.marked(notes, "leader-new") and not roster.live(notes, "leader-new")
    ahead = roster.mark("leader-ahead", EPOCH + dt.timedelta(seconds=roster.GONE_MARGIN + 1))
    _apply(ahead, roster.tidied(ahead, {}, EPOCH))
    assert roster.marked(ahead, "leader-ahead") and not roster.live(ahead, "leader-ahead")


def test_the_marks_of_a_cronjob_with_one_election_per_run_stay_bounded_and_safe() -> None:
    """A run a minute for three days, each run's Lease swept a few minutes after its run,
    and a tidy at every start once past ``TIDY_AT``: the object never nears the API
    server's cap (a few thousand runs reached it), and every election whose Lease is there
    or went within the last hour keeps a mark."""
    notes: dict[str, str] = {}
    biggest = 0
    names = [f"leader-nightly-report-{29_000_000 + run}" for run in range(3 * 24 * 60)]
    for run, lease in enumerate(names):
        now = EPOCH + dt.timedelta(minutes=run)
        there = {name: 15 for name in names[max(0, run - 5) : run]}  # not swept yet
        if roster.size(notes) > roster.TIDY_AT:
            _apply(notes, roster.tidied(notes, there, now))
        notes.update(roster.mark(lease, now, 15))
        biggest = max(biggest, roster.size(notes))
        for recent in names[max(0, run - 65) : run + 1]:
            assert roster.marked(notes, recent), (run, recent)
    assert biggest < roster.TIDY_AT + 16 * 1024 < roster.LIMIT, biggest


def test_a_coordination_lease_proves_a_first_term_only_once_older_than_a_lease() -> None:
    obj = roster.new_object("ns", {})
    obj["metadata"]["creationTimestamp"] = "2026-11-27T10:00:00Z"
    assert not roster.settled(obj, EPOCH + dt.timedelta(seconds=16), 15)  # maybe 10:00:00.9
    assert roster.settled(obj, EPOCH + dt.timedelta(seconds=16.01), 15)
    assert not roster.settled(roster.new_object("ns", {}), EPOCH + dt.timedelta(days=9), 15)
