"""The elections' marks: a fixed room at any count, never dropped while they may matter."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json

from sidecar.core import marks
from sidecar.core.defaults import MAX_DURATION

EPOCH = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.UTC)


def _apply(notes: dict[str, str], patch: dict[str, str | None]) -> None:
    for key, value in patch.items():
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value


def _after(seconds: float) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=seconds)


def test_a_mark_stays_while_its_lease_is_listed_and_two_turnovers_after() -> None:
    notes: dict[str, str] = {}
    _apply(notes, marks.marking(notes, "leader-kept", EPOCH, 15))
    _apply(notes, marks.marking(notes, "leader-gone", EPOCH, 15))
    assert marks.live(notes, "leader-kept") and marks.live(notes, "leader-gone")
    epoch = marks.epoch(marks.read(notes))
    assert epoch == marks.GONE_MARGIN + marks.REMARK_AFTER
    assert not marks.due(notes, _after(epoch)) and marks.due(notes, _after(epoch + 1))
    listed = {"leader-kept": 15}
    for turn in range(1, 5):
        now = _after(turn * (epoch + 1))
        assert marks.due(notes, now)
        _apply(notes, marks.rotated(notes, listed, now))
        assert not marks.due(notes, now)
        assert marks.live(notes, "leader-kept"), turn
        assert not marks.live(notes, "leader-gone")
        assert marks.marked(notes, "leader-gone") == (turn < 3), turn


def test_the_turnover_waits_for_the_longest_lease_duration_marked() -> None:
    """A bit must outlive any term its holder may still vouch for after its Lease went."""
    notes: dict[str, str] = {}
    _apply(notes, marks.marking(notes, "leader-short", EPOCH, 15))
    _apply(notes, marks.marking(notes, "leader-day", EPOCH, 86400))
    assert marks.epoch(marks.read(notes)) == marks.GONE_MARGIN + 86400
    _apply(notes, marks.marking(notes, "leader-unknown", EPOCH))
    assert marks.epoch(marks.read(notes)) == marks.GONE_MARGIN + MAX_DURATION
    assert not marks.due(notes, _after(marks.GONE_MARGIN + MAX_DURATION))


def test_what_cannot_be_read_marks_every_election_for_two_turnovers() -> None:
    for garbage in ("not json", '{"since":"x"}', json.dumps({"since": "2026-11-27T10:00:00Z",
                    "generations": [{"bits": "AAAA", "duration": 15}]})):  # fmt: skip
        notes = {marks.KEY: garbage}
        assert marks.marked(notes, "leader-any") and not marks.live(notes, "leader-any")
        assert marks.due(notes, EPOCH)
        _apply(notes, marks.marking(notes, "leader-mine", EPOCH, 15))
        assert marks.live(notes, "leader-mine") and marks.marked(notes, "leader-any")
        for turn in range(1, 4):
            _apply(notes, marks.rotated(notes, {}, _after(turn * 10_000)))
            assert marks.marked(notes, "leader-any") == (turn < 2), (garbage, turn)


def test_a_bitmap_of_the_wrong_size_or_a_bit_out_of_range_is_unreadable() -> None:
    dense = "d" + base64.b64encode(bytes(marks.BITS // 8 + 1)).decode()
    beyond = "s" + base64.b64encode(marks.BITS.to_bytes(2, "big")).decode()
    odd = "s" + base64.b64encode(b"\x00\x01\x02").decode()
    for bits in (dense, beyond, odd, "x", "s!!"):
        value = {"since": "2026-11-27T10:00:00Z", "generations": [{"bits": bits, "duration": 15}]}
        notes = {marks.KEY: json.dumps(value)}
        assert marks.marked(notes, "leader-any") and marks.due(notes, EPOCH), bits


def test_few_bits_are_written_one_by_one_and_many_as_the_whole_bitmap() -> None:
    notes: dict[str, str] = {}
    for i in range(2200):
        _apply(notes, marks.marking(notes, f"leader-t{i}", EPOCH, 15))
        if i in (10, 2199):
            packed = json.loads(notes[marks.KEY])["generations"][0]["bits"]
            assert packed[0] == ("s" if i == 10 else "d"), i
    assert all(marks.read(notes).has(f"leader-t{i}") for i in range(2200))
    assert len(notes[marks.KEY]) < 6000  # the whole bitmap: 4 KiB, base64


def test_marks_written_one_per_election_before_count_and_are_folded_at_the_turnover() -> None:
    legacy_key = marks.LEGACY + f"{binascii.crc32(b'leader-old'):08x}"
    notes = {
        legacy_key: json.dumps({"lease": "leader-old", "since": "2026-11-27T10:00:00Z"}),
        marks.LEGACY + "not-a-crc": "someone else's",
    }
    assert marks.marked(notes, "leader-old") and not marks.live(notes, "leader-old")
    assert not marks.marked(notes, "leader-new")
    assert marks.due(notes, EPOCH)  # folded at the first chance
    _apply(notes, marks.rotated(notes, {}, EPOCH))
    assert legacy_key not in notes and marks.LEGACY + "not-a-crc" in notes
    assert marks.live(notes, "leader-old")
    assert marks.epoch(marks.read(notes)) == marks.GONE_MARGIN + MAX_DURATION  # unknown


def test_a_create_carries_the_creators_mark_in_the_newest_generation() -> None:
    mine = marks.marking({}, "leader-mine", EPOCH, 15)
    created = {**mine, **marks.rotated(mine, {"leader-there": 15}, EPOCH, carry=True)}
    assert marks.live(created, "leader-mine") and marks.live(created, "leader-there")
    assert len(marks.read(created).generations) == 1


def test_the_marks_of_a_cronjob_with_one_election_per_run_stay_small_and_safe() -> None:
    """A run a minute for three days, each run's Lease swept a few minutes after its run,
    a turnover whenever due at a start: the value stays a few KiB (per-election marks
    reached the API server's 256 KiB cap after a few thousand runs), and every election
    whose Lease is there or went within the longest lease and ``GONE_MARGIN`` is marked."""
    notes: dict[str, str] = {}
    biggest = turnovers = 0
    names = [f"leader-nightly-report-{29_000_000 + run}" for run in range(3 * 24 * 60)]
    for run, lease in enumerate(names):
        now = EPOCH + dt.timedelta(minutes=run)
        there = {name: 15 for name in names[max(0, run - 5) : run]}  # not swept yet
        if marks.due(notes, now):
            _apply(notes, marks.rotated(notes, there, now))
            turnovers += 1
        _apply(notes, marks.marking(notes, lease, now, 15))
        biggest = max(biggest, len(notes[marks.KEY]))
        found = marks.read(notes)
        for recent in names[max(0, run - 65) : run + 1]:
            assert found.has(recent), (run, recent)
    assert turnovers >= 50 and biggest < 4096, (turnovers, biggest)


def test_a_thousand_elections_take_a_few_kib_and_few_others_share_their_bits() -> None:
    notes: dict[str, str] = {}
    for i in range(1000):
        _apply(notes, marks.marking(notes, f"leader-t{i}", EPOCH, 15))
    assert all(marks.marked(notes, f"leader-t{i}") for i in range(1000))
    assert len(notes[marks.KEY]) < 3072  # 1,000 bits of 2 bytes, base64
    # contract §2 says 2.6 % of new names share a bit among 1,000 marked: each of those
    # waits a lease duration once, needlessly.
    found = marks.read(notes)
    shared = sum(found.has(f"other-{i}") for i in range(10_000))
    assert shared < 10_000 * 0.03, shared
