"""Which elections have had a Lease: the marks in the namespace's coordination Lease.

A mark says "this election had a Lease": without one, a Lease that is absent
was never created, so no term of it can still be vouched for, and its first
candidate may lead at once (contract §2, "the first term"). Guarantees:

- the marks take bounded room at any count: one annotation (``KEY``) holding
  ``GENERATIONS`` bitmaps of ``BITS`` bits (each written as its set bits, two
  bytes apiece, while that is shorter, else whole; base64: no zlib, which
  ``run`` is kept without), an election's bit picked by the CRC-32 of its
  Lease's name. Two elections that
  share a bit cost nothing unsafe: the second waits a lease duration once;
- a bit is never taken out while it may matter. The sidecar that claims the
  sweep duty turns the generations over (``rotated``) once the newest is
  older than ``epoch``: the oldest is dropped, the newest starts again from
  the Leases listed then. A Lease deleted while its holder still vouches was
  listed, or marked by its creator (``driver.firstterm``), within the last two
  generations, so its bit outlives the longest lease duration marked by at
  least ``GONE_MARGIN``;
- what cannot be read counts as marked: an unreadable value (garbage, a bitmap
  of the wrong size, a bit out of range) marks every election until two
  turnovers have passed;
- marks written one per election before this scheme (``LEGACY``) are read as
  marks, and folded into the newest generation at the next turnover.

Pure: reading tolerantly, the write that sets a bit, the turnover. Each write
goes over the version read, since a bit set is a read, then a write.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .defaults import MAX_DURATION
from .lease import format_microtime, parse_time
from .roster import read_value

KEY = "elections.leader-election.grelmicro.io"
#: One annotation per election (``<LEGACY><crc32 hex>``), as written before the bitmaps.
LEGACY = KEY + "/"
BITS = 32768
GENERATIONS = 3
#: How far two sidecars' views of the API server's clock may disagree (seconds): the
#: turnover is judged by one, the generation it ends was stamped by another.
GONE_MARGIN = 3600
#: A Lease created this long (seconds) after its candidate set the bit has it set again
#: (``driver.firstterm``), so the turnover that lists the namespace before the create
#: cannot leave the bit in the oldest generation only.
REMARK_AFTER = 600
_BYTES = BITS // 8
_FULL = b"\xff" * _BYTES


@dataclass(frozen=True)
class Generation:
    bits: bytes
    #: The longest lease duration (seconds) of an election marked in it: what its bits outlive.
    duration: int

    def has(self, index: int) -> bool:
        return bool(self.bits[index // 8] & (1 << (index % 8)))

    def with_bits(self, indexes: Mapping[int, int]) -> Generation:
        """With the bits ``indexes`` (index -> lease duration) set."""
        bits = bytearray(self.bits)
        for index in indexes:
            bits[index // 8] |= 1 << (index % 8)
        return Generation(bytes(bits), max([self.duration, *indexes.values()]))


EMPTY = Generation(bytes(_BYTES), 0)


@dataclass(frozen=True)
class Marks:
    #: When the newest generation started (the API server's clock); None: never written,
    #: or unreadable.
    since: dt.datetime | None
    generations: tuple[Generation, ...]  # the newest first
    #: Bits of ``LEGACY`` marks (index -> lease duration).
    legacy: dict[int, int]
    #: The value was there but could not be read: every election counts as marked.
    unreadable: bool = False

    def has(self, lease: str) -> bool:
        """Whether ``lease``'s election is marked, in any generation or a legacy mark."""
        index = bit(lease)
        return index in self.legacy or any(g.has(index) for g in self.generations)

    def live(self, lease: str) -> bool:
        """Whether ``lease``'s bit is in the newest generation (two turnovers from dropped)."""
        return self.since is not None and self.generations[0].has(bit(lease))


def bit(lease: str) -> int:
    return binascii.crc32(lease.encode()) % BITS


def _duration(value: Any) -> int:
    """A lease duration as marked: unknown or unusable counts as ``MAX_DURATION``."""
    return value if type(value) is int and 1 <= value <= MAX_DURATION else MAX_DURATION


def _packed(bits: bytes) -> str:
    """``s`` and the set bits' indexes (2 bytes each, big-endian), or ``d`` and the whole
    bitmap, whichever is shorter; base64."""
    found = [
        (at * 8 + k).to_bytes(2, "big")
        for at, byte in enumerate(bits)
        if byte
        for k in range(8)
        if byte >> k & 1
    ]
    if 2 * len(found) < _BYTES:
        return "s" + base64.b64encode(b"".join(found)).decode()
    return "d" + base64.b64encode(bits).decode()


def _unpacked(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text[1:], validate=True)
    except ValueError:
        return None
    if text[:1] == "d":
        return raw if len(raw) == _BYTES else None
    if text[:1] != "s" or len(raw) % 2 or len(raw) >= _BYTES:
        return None
    bits = bytearray(_BYTES)
    for at in range(0, len(raw), 2):
        index = int.from_bytes(raw[at : at + 2], "big")
        if index >= BITS:
            return None
        bits[index // 8] |= 1 << (index % 8)
    return bytes(bits)


def _generation(item: Any) -> Generation | None:
    if not isinstance(item, dict) or not isinstance(item.get("bits"), str):
        return None
    bits = _unpacked(item["bits"])
    if bits is None:
        return None
    duration = item.get("duration")
    return Generation(bits, 0 if type(duration) is int and duration == 0 else _duration(duration))


def _legacy_index(key: str) -> int | None:
    """The bit of a legacy mark's key (its name the CRC-32 in hex); None for other keys."""
    if not key.startswith(LEGACY):
        return None
    try:
        return int(key[len(LEGACY) :], 16) % BITS
    except ValueError:
        return None  # not a mark's key: some other writer's


def _legacy(notes: Mapping[str, str]) -> dict[int, int]:
    found: dict[int, int] = {}
    for key, value in notes.items():
        if (index := _legacy_index(key)) is not None:
            found[index] = max(found.get(index, 0), _duration(read_value(value).get("duration")))
    return found


def read(notes: Mapping[str, str]) -> Marks:
    """The marks in the annotations ``notes``; an unreadable value marks every election."""
    legacy = _legacy(notes)
    value = notes.get(KEY)
    if value is None:
        return Marks(None, (), legacy)
    item = read_value(value)
    found, since = item.get("generations"), parse_time(item.get("since"))
    generations = [_generation(g) for g in found] if isinstance(found, list) else [None]
    if since is None or not 1 <= len(generations) <= GENERATIONS or None in generations:
        return Marks(None, (Generation(_FULL, MAX_DURATION),), legacy, unreadable=True)
    return Marks(since, tuple(g for g in generations if g is not None), legacy)


def marked(notes: Mapping[str, str], lease: str) -> bool:
    """Whether ``lease``'s election is recorded as having had a Lease (``Marks.has``)."""
    return read(notes).has(lease)


def live(notes: Mapping[str, str], lease: str) -> bool:
    """Whether ``lease``'s bit is in the newest generation (``Marks.live``)."""
    return read(notes).live(lease)


def _value(since: dt.datetime, generations: list[Generation]) -> dict[str, str]:
    packed = [
        {
            "duration": g.duration,
            "bits": _packed(g.bits),
        }
        for g in generations[:GENERATIONS]
    ]
    body = {"since": format_microtime(since), "generations": packed}
    return {KEY: json.dumps(body, separators=(",", ":"))}


def marking(
    notes: Mapping[str, str], lease: str, now: dt.datetime, duration: float | None = None
) -> dict[str, str]:
    """The annotations that set ``lease``'s bit in the newest generation, to write over the
    version ``notes`` were read at; ``duration``: its candidates' lease duration (unknown:
    ``MAX_DURATION``). Over an unreadable value, everything stays marked: the value read
    becomes the older generation."""
    marks = read(notes)
    index = {bit(lease): _duration(math.ceil(duration) if duration else None)}
    if marks.since is None:
        return _value(now, [EMPTY.with_bits(index), *marks.generations])
    newest, *rest = marks.generations
    return _value(marks.since, [newest.with_bits(index), *rest])


def epoch(marks: Marks) -> float:
    """How long (seconds) the newest generation lasts before a turnover."""
    longest = max((g.duration for g in marks.generations), default=0)
    return GONE_MARGIN + max(REMARK_AFTER, longest)


def due(notes: Mapping[str, str], now: dt.datetime) -> bool:
    """Whether the generations are due a turnover at ``now`` (the API server's clock): the
    newest is older than ``epoch``, or the value is unreadable, or legacy marks are there."""
    marks = read(notes)
    if marks.legacy or marks.unreadable:
        return True
    return marks.since is not None and (now - marks.since).total_seconds() > epoch(marks)


def rotated(
    notes: Mapping[str, str],
    present: Mapping[str, int | None],
    now: dt.datetime,
    carry: bool = False,
) -> dict[str, str | None]:
    """The merge patch of a turnover at ``now``, given the Leases present (name -> lease
    duration) in a list made after ``notes`` were read: a new newest generation with their
    bits and the legacy marks' (which are taken out), the oldest dropped. ``carry``: the
    newest read stays newest, with those bits added (a create: nothing is dropped)."""
    marks = read(notes)
    listed = {bit(name): _duration(duration) for name, duration in present.items()}
    kept = list(marks.generations)
    base, kept = (kept[0], kept[1:]) if carry and kept else (EMPTY, kept)
    fresh = base.with_bits({**listed, **marks.legacy})
    patch: dict[str, str | None] = dict.fromkeys(k for k in notes if _legacy_index(k) is not None)
    patch.update(_value(now, [fresh, *kept]))
    return patch
