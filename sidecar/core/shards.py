"""Shards (contract §2, shards): which member should own each of an election's N shards.

Pure: ``assign`` maps shards to members from who the members are and who owns
what now; the names of a shard's Lease and of a member's heartbeat Lease.
Guarantees, for P members and N shards:

- balance: every member is given ⌊N/P⌋ or ⌈N/P⌉ shards, whoever owns what;
  the N mod P members that get one more are picked from the member set
  alone, so a move under way never changes who they are;
- stickiness: a shard whose owner is a member stays with it while the owner
  is within its share, so a change of members moves only what balance needs
  (3 to 4 pods with 12 shards moves 3, each to the new pod);
- agreement: the same inputs give the same answer in every pod (a rendezvous
  score, CRC-32 of the shard and the member: no randomness, no clock).

A shard whose owner is not a member (it crashed, or is not yet seen) counts
as unowned: it goes to the member that scores highest for it among those with
room, which is what rendezvous hashing gives when every member has room.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Collection, Mapping

#: The most shards an election may have: each is a Lease and a watch in every pod.
MAX_SHARDS = 64
#: A shard's Lease: the election's, then this, then the shard's number.
SHARD_INFIX = "-shard-"
#: A member's heartbeat Lease: the election's, then this, then the member's name.
MEMBER_INFIX = "-member-"
#: The longest Lease name (a DNS subdomain).
MAX_NAME = 253
#: The label of a shard's Lease: the Lease name of the election it is a shard of.
SHARD_LABEL = "leader-election.grelmicro.io/shard-of"
#: The label of a member's heartbeat Lease: the Lease name of the election it is a member of.
MEMBER_LABEL = "leader-election.grelmicro.io/member-of"


def shard_lease(lease: str, shard: int) -> str:
    """The Lease of shard ``shard`` (0-based) of the election whose Lease is ``lease``."""
    return f"{lease}{SHARD_INFIX}{shard}"


def shard_of(name: str, labels: Mapping[str, str]) -> tuple[str, int] | None:
    """(the election's Lease, the shard) of a Lease that ``SHARD_LABEL`` says is a shard."""
    lease = labels.get(SHARD_LABEL, "")
    number = name.removeprefix(f"{lease}{SHARD_INFIX}")
    if not lease or number == name or not number.isdigit():
        return None
    return lease, int(number)


def member_lease(lease: str, identity: str) -> str:
    """The heartbeat Lease of member ``identity``; a name past ``MAX_NAME`` ends in a CRC."""
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", identity.lower())).strip("-")
    full = f"{lease}{MEMBER_INFIX}{name or 'x'}"
    if len(full) <= MAX_NAME and name == identity:
        return full
    crc = f"{binascii.crc32(identity.encode()):08x}"  # two names that clean up alike differ
    return f"{full[: MAX_NAME - len(crc) - 1].rstrip('-')}-{crc}"


def score(shard: int, member: str) -> int:
    """How much ``member`` is preferred for ``shard`` (rendezvous hashing)."""
    return binascii.crc32(f"{shard}/{member}".encode())


def assign(
    shards: int, members: Collection[str], owners: Mapping[int, str | None]
) -> dict[int, str]:
    """Shard -> the member that should own it (every shard, unless there are no members).

    ``owners``: who owns each shard now, as this pod sees it (None or absent: nobody)."""
    pool = sorted(set(members))
    if not pool:
        return {}
    base, extra = divmod(shards, len(pool))
    ranked = sorted(pool, key=lambda m: (-score(-1, m), m))  # who gets one more: members alone
    share = {m: base + (k < extra) for k, m in enumerate(ranked)}
    out: dict[int, str] = {}
    for member in pool:  # each keeps what it owns, its best-scored first, up to its share
        held = sorted(
            (i for i in range(shards) if owners.get(i) == member),
            key=lambda i: (-score(i, member), i),
        )
        out.update((i, member) for i in held[: share[member]])
    count = {m: sum(1 for owner in out.values() if owner == m) for m in pool}
    free = [i for i in range(shards) if i not in out]
    pairs = sorted(((i, m) for i in free for m in pool), key=lambda p: (-score(*p), p))
    for shard, member in pairs:
        if shard not in out and count[member] < share[member]:
            out[shard] = member
            count[member] += 1
    return out
