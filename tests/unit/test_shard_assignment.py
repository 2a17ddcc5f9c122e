"""The assignment of shards to members (``core.shards``): balanced, sticky, the same everywhere.

Pure: many member sets and shard counts, drawn from a seeded source, with pod
names shaped like a Deployment's.
"""

from __future__ import annotations

import random
import string

import pytest

from sidecar.core.shards import MAX_NAME, SHARD_LABEL, assign, member_lease, shard_lease, shard_of

RNG_SEED = 20261130


def _pods(rng: random.Random, count: int) -> list[str]:
    tail = string.ascii_lowercase + string.digits
    return [f"app-7d9f8c-{''.join(rng.choice(tail) for _ in range(5))}" for _ in range(count)]


def _counts(assigned: dict[int, str], members: list[str]) -> list[int]:
    return [sum(1 for owner in assigned.values() if owner == m) for m in members]


def _cases() -> list[tuple[int, list[str]]]:
    rng = random.Random(RNG_SEED)
    return [(rng.randint(1, 64), _pods(rng, rng.randint(1, 8))) for _ in range(400)]


def test_every_member_gets_the_floor_or_the_ceiling_of_its_share() -> None:
    for shards, members in _cases():
        assigned = assign(shards, members, {})
        counts = _counts(assigned, members)
        assert sorted(assigned) == list(range(shards))
        assert sum(counts) == shards and max(counts) - min(counts) <= 1, (shards, counts)


def test_a_balanced_assignment_is_kept_as_it_is() -> None:
    for shards, members in _cases():
        assigned = assign(shards, members, {})
        assert assign(shards, members, assigned) == assigned


def test_a_new_member_takes_only_its_share_and_only_from_the_others() -> None:
    rng = random.Random(RNG_SEED + 1)
    for shards, members in _cases():
        before = assign(shards, members, {})
        new = _pods(rng, 1)[0]
        after = assign(shards, [*members, new], before)
        moved = [s for s in range(shards) if after[s] != before[s]]
        assert all(after[s] == new for s in moved)
        assert len(moved) <= shards // (len(members) + 1) + 1


def test_three_pods_to_four_with_twelve_shards_moves_three() -> None:
    rng = random.Random(RNG_SEED + 2)
    for _ in range(200):
        pods = _pods(rng, 4)
        before = assign(12, pods[:3], {})
        after = assign(12, pods, before)
        assert sum(after[s] != before[s] for s in range(12)) == 3


def test_a_member_gone_gives_up_only_its_own_shards() -> None:
    for shards, members in _cases():
        if len(members) < 2:
            continue
        before = assign(shards, members, {})
        after = assign(shards, members[1:], before)
        moved = {s for s in range(shards) if after[s] != before[s]}
        assert moved == {s for s, owner in before.items() if owner == members[0]}


def test_an_owner_that_is_not_a_member_counts_as_nobody() -> None:
    members = ["a", "b"]
    assert assign(4, members, {0: "gone", 1: "gone"}) == assign(4, members, {})


def test_the_same_inputs_give_the_same_answer_in_any_order() -> None:
    for shards, members in _cases()[:50]:
        owners = dict(enumerate(reversed(members)))
        assert assign(shards, members, owners) == assign(shards, members[::-1], owners)


def test_no_members_no_assignment() -> None:
    assert assign(12, [], {}) == {}


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        ("web-0", "leader-main-member-web-0"),
        ("Web_0", None),  # cleaned up, so a CRC tells it from "web-0"
    ],
)
def test_member_lease_names(identity: str, expected: str | None) -> None:
    name = member_lease("leader-main", identity)
    if expected is not None:
        assert name == expected
    else:
        assert name.startswith("leader-main-member-web-0-") and name != member_lease(
            "leader-main", "web-0"
        )


def test_long_names_stay_valid() -> None:
    name = member_lease("leader-" + "x" * 200, "pod-" + "y" * 100)
    assert len(name) <= MAX_NAME and name[-1] != "-"
    assert shard_lease("leader-main", 11) == "leader-main-shard-11"


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        ("leader-main-shard-11", {SHARD_LABEL: "leader-main"}, ("leader-main", 11)),
        ("leader-a-shard-b-shard-2", {SHARD_LABEL: "leader-a-shard-b"}, ("leader-a-shard-b", 2)),
        ("leader-main-shard-11", {}, None),  # a plain election named "main-shard-11"
        ("leader-main-shard-x", {SHARD_LABEL: "leader-main"}, None),
        ("leader-other-shard-1", {SHARD_LABEL: "leader-main"}, None),
        ("leader-main-shard-", {SHARD_LABEL: "leader-main"}, None),
    ],
)
def test_a_shard_is_known_by_its_label_and_its_name(
    name: str, labels: dict[str, str], expected: tuple[str, int] | None
) -> None:
    assert shard_of(name, labels) == expected
