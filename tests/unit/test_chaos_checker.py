"""The checker itself, on made-up records: it must catch what it is there to catch."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import (
    Claim,
    Fault,
    FileVersion,
    Probe,
    Resource,
    ShardEntry,
    check,
    claims_of,
    gaps_of,
    shard_versions,
    trends_of,
)
from tests.chaos.moves import Ack

T = 1_000_000.0  # an arbitrary wall-clock origin


def v(
    who: str,
    at: float,
    leader: bool,
    valid: float | None = None,
    seen: float | None = None,
    token: int = 1,
) -> FileVersion:
    return FileVersion(
        who=who,
        seen=T + (seen if seen is not None else at + 0.01),
        updated_at=T + at,
        is_leader=leader,
        valid_until=T + valid if valid is not None else None,
        fencing_token=token if leader else None,
    )


def term(who: str, start: float, end: float, token: int) -> list[FileVersion]:
    """``who`` leads from ``start`` with ``token``, valid until ``end``, and says so at ``end``."""
    return [v(who, start, True, end, token=token), v(who, end, False)]


def run(
    versions: list[FileVersion],
    probes: list[Probe] | None = None,
    faults: list[Fault] | None = None,
    **options: Any,  # check's own, e.g. lazy= or untokened=
):  # type: ignore[no-untyped-def]
    options.setdefault("logs", [])
    return check(
        versions=versions,
        probes=probes or [],
        faults=faults or [],
        resources=[],
        start=T,
        end=T + 30,
        lease_duration=3.0,
        **options,
    )


def test_a_claim_lasts_until_valid_until_or_the_next_version() -> None:
    claims = claims_of(
        [
            v("a", 0, True, 2),
            v("a", 1, True, 3),
            v("a", 1.5, False),  # renewed, then stepped down
            v("b", 10, True, 12),  # last version: runs to valid_until (dead or paused)
        ]
    )
    assert [(c.who, c.start - T, c.end - T) for c in claims] == [
        ("a", 0, 1),
        ("a", 1, 1.5),
        ("b", 10, 12),
    ]


def test_two_claims_at_once_are_a_violation_with_a_timeline() -> None:
    report = run([v("a", 0, True, 2), v("b", 1.5, True, 3.5, token=2)])
    assert len(report.violations) == 1
    violation = report.violations[0]
    assert violation.who == ("a", "b") and abs(violation.width - 0.5) < 1e-6
    assert "a" in violation.timeline and "is_leader=True" in violation.timeline


def test_a_paused_leaders_stale_file_claims_until_valid_until() -> None:
    # a's process is stopped after its last write: nothing replaces the file.
    stale = [v("a", 0, True, 2)]
    assert run([*stale, v("b", 2.0, True, 4, token=2)]).violations == []
    assert len(run([*stale, v("b", 1.99, True, 4, token=2)]).violations) == 1


def test_a_graceful_handover_is_judged_by_the_writers_clocks_not_the_samplers() -> None:
    # a writes "not leader" at 1.000 (seen late at 1.200); b leads from 1.050 (seen at 1.060).
    report = run(
        [
            v("a", 0, True, 2),
            v("a", 1.0, False, seen=1.2),
            v("b", 1.05, True, 3, seen=1.06, token=2),
        ]
    )
    assert report.violations == []
    assert report.handovers == 1 and report.acquisitions == 2


def test_a_probe_that_says_leader_inside_anothers_claim_is_a_violation() -> None:
    files = [v("a", 0, True, 2)]
    late = Probe("b", T + 1.0, T + 1.01, 200, updated_at=T + 1.0, valid_until=T + 3)
    fine = Probe("b", T + 2.5, T + 2.51, 200, updated_at=T + 2.5, valid_until=T + 4)
    refused = Probe("b", T + 1.0, T + 1.3, 0)
    assert len(run(files, [late]).violations) == 1
    assert run(files, [fine, refused]).violations == []


def test_gaps_are_attributed_to_faults_and_measured_after_they_clear() -> None:
    claims = [
        Claim("a", T, T + 2, v("a", 0, True, 2)),
        Claim("b", T + 9, T + 12, v("b", 9, True, 12)),
    ]
    fault = Fault("apiserver", "cluster", T + 1, T + 8)
    (gap,) = gaps_of(claims[:2], [fault], T, T + 12, 3.0)
    assert gap.length == 7 and gap.causes == [fault] and abs(gap.recovery - 1.0) < 1e-9
    (lonely,) = gaps_of(claims, [], T, T + 12, 3.0)
    assert lonely.causes == [] and lonely.recovery == 7


def test_trends_see_a_leak() -> None:
    steady = [Resource("a", 1, T + i, 9 + (i % 2), 26000) for i in range(100)]
    leaking = [Resource("b", 2, T + i, 9 + i // 10, 26000 + 50 * i) for i in range(100)]
    (a, b) = trends_of(steady + leaking)
    assert a.fd_growth <= 1 and a.rss_growth_kb == 0
    assert b.fd_growth >= 4 and b.rss_growth_kb > 3000
    # An outage early in the life (connections closed) is not mistaken for growth afterwards.
    outage = [Resource("c", 3, T + i, 7 if 10 <= i < 30 else 10, 26000) for i in range(100)]
    (c,) = trends_of(outage)
    assert c.fd_growth == 0
    # A flood late in the life holds 32 connections for a while: not a leak, unless
    # the connections stay open after it (then the samples after the settle count).
    flooded = [Resource("d", 4, T + i, 42 if 90 <= i < 95 else 10, 26000) for i in range(100)]
    flood = Fault("flood", "d", T + 90, T + 94)
    assert trends_of(flooded)[0].fd_growth == 32
    assert trends_of(flooded, floods=[flood])[0].fd_growth == 0
    stuck = [Resource("e", 5, T + i, 42 if i >= 90 else 10, 26000) for i in range(110)]
    assert trends_of(stuck, floods=[Fault("flood", "e", T + 90, T + 94)])[0].fd_growth == 32


def test_a_new_leader_must_carry_a_larger_fencing_token() -> None:
    ok = [
        v("a", 0, True, 2, token=3),
        v("a", 2, False),
        v("b", 3, True, 5, token=4),
        v("a", 6, True, 8, token=5),
    ]
    assert run(ok).violations == []
    same = [v("a", 0, True, 2, token=3), v("a", 2, False), v("b", 3, True, 5, token=3)]
    (violation,) = run(same).violations
    assert violation.kind == "fencing" and violation.who == ("a", "b")
    older = [*ok, v("a", 8, False), v("b", 9, True, 10, token=4)]
    assert [x.kind for x in run(older).violations] == ["fencing"]


def test_a_lazy_apps_claim_runs_to_valid_until_whatever_the_sidecar_writes_next() -> None:
    # a's sidecar restarts (its new process writes "not leader" at 1.0) while its app,
    # which re-reads now and then, still acts on the file of 0.0 until 2.0.
    versions = [v("a", 0, True, 2), v("a", 1.0, False), v("b", 1.5, True, 3.5, token=2)]
    assert run(versions).violations == []
    lazy = run(versions, lazy={"a"})
    (violation,) = lazy.violations
    assert violation.kind == "file/file" and abs(violation.width - 0.5) < 1e-6


def test_an_acknowledged_drain_ends_a_lazy_apps_claim_of_that_term_only() -> None:
    # a's app, lazy, acknowledged at 1.2 the end of its term 1 (a transfer's drain): b may
    # lead from 1.5. An acknowledgement of another term (2) cuts nothing.
    versions = [v("a", 0, True, 2), v("a", 1.0, False), v("b", 1.5, True, 3.5, token=2)]
    acked = run(versions, lazy={"a"}, acks=[Ack("a", 1, T + 1.2)])
    assert acked.violations == []
    other = run(versions, lazy={"a"}, acks=[Ack("a", 2, T + 1.2)])
    assert [x.kind for x in other.violations] == ["file/file"]


def test_an_older_versions_tokens_are_left_out_of_the_fencing_order_and_counted() -> None:
    # "old" publishes leaseTransitions (small), today's sidecars resourceVersions.
    versions = [*term("a", 0, 2, 500), *term("old", 3, 5, 7), v("b", 6, True, 8, token=530)]
    assert [x.kind for x in run(versions).violations] == ["fencing"]
    report = run(versions, untokened={"old"})
    assert report.violations == [] and report.unjudged_fencing == 1
    assert "not judged: 1" in report.summary()
    # today's tokens must still rise across the old one's term
    back = [*versions, v("b", 8, False), *term("old", 9, 10, 8), v("a", 11, True, 12, token=520)]
    report = run(back, untokened={"old"})
    assert [(x.kind, x.who) for x in report.violations] == [("fencing", ("b", "a"))]


def test_tokens_start_over_after_an_unbumped_restore() -> None:
    # a led at 0 (token 400); the backup was taken at 1 and restored by 9; b led at 10
    # with 400 again: an unbumped restore repeats tokens (excluded by the contract).
    versions = [*term("a", 0, 2, 400), v("b", 10, True, 12, token=400)]
    restore = Fault("restore", "cluster", T + 1, T + 9)
    assert run(versions, faults=[restore]).violations == []
    bumped = Fault("restore-bump", "cluster", T + 1, T + 9)  # a bumped restore does not
    assert [x.kind for x in run(versions, faults=[bumped]).violations] == ["fencing"]
    # the order still holds within the stretch after it
    after = [*versions, v("b", 12, False), v("a", 13, True, 14, token=399)]
    assert [x.who for x in run(after, faults=[restore]).violations] == [("b", "a")]


def test_a_claim_published_while_a_restore_ran_is_not_judged() -> None:
    # The long run's case (a loaded node): a's write reached the old store before the API
    # server stopped, but a published it only later; b then led on the restored store with
    # the same token. Which store a claim made during the restore went to is unknown.
    versions = [*term("a", 0, 2, 393), *term("a", 6, 7, 400), v("b", 8, True, 10, token=400)]
    restore = Fault("restore", "cluster", T + 1, T + 9)
    assert run(versions, faults=[restore]).violations == []


# ---- sharded elections (issue 40, item 4): each shard judged as an election of its own ----


def sv(who: str, at: float, owns: dict[int, tuple[float, int]], shards: int = 4) -> FileVersion:
    """A sharded file of ``who`` written at ``at``: it owns each shard of ``owns`` (valid
    until, token) and no other; the top level says "owns any" and claims nothing itself."""
    return FileVersion(
        who=who,
        seen=T + at + 0.01,
        updated_at=T + at,
        is_leader=bool(owns),
        valid_until=None,
        shards=tuple(
            ShardEntry(
                shard=s,
                is_leader=s in owns,
                valid_until=T + owns[s][0] if s in owns else None,
                holder=who if s in owns else None,
                fencing_token=owns[s][1] if s in owns else None,
            )
            for s in range(shards)
        ),
    )


def test_two_apps_acting_on_one_shard_at_once_are_a_violation_of_that_shard() -> None:
    # a owns shards 0 and 1 until 2; b claims shard 1 from 1.5: half a second on two apps.
    report = run([sv("a", 0, {0: (2, 10), 1: (2, 11)}), sv("b", 1.5, {1: (3.5, 20)})])
    (violation,) = report.violations
    assert violation.kind == "file/file" and violation.shard == 1
    assert violation.who == ("a", "b") and abs(violation.width - 0.5) < 1e-6
    assert "shard 1" in violation.detail and "token=11" in violation.timeline
    assert "on shard 1" in report.summary()


def test_a_sharded_handover_and_apps_on_different_shards_are_fine() -> None:
    # a and b act at once, on different shards; shard 1 moves from a (which says so at
    # 1.0) to b (from 1.05): no violation, one handover on shard 1.
    versions = [
        sv("a", 0, {0: (2, 10), 1: (2, 11)}),
        sv("b", 0.2, {2: (2.2, 12), 3: (2.2, 13)}),
        sv("a", 1.0, {0: (3, 10)}),
        sv("b", 1.05, {1: (3, 20), 2: (3, 12), 3: (3, 13)}),
    ]
    report = run(versions)
    assert report.violations == []
    assert report.shards == 4 and report.shard_handovers == {0: 0, 1: 1, 2: 0, 3: 0}
    # shard 1 was acted on under 11 then 20; the renewals of 10, 12 and 13 count once each
    assert report.shard_acquisitions == 5 and report.handovers == 1
    assert "shard acquisitions: 5" in report.summary()


def test_a_shards_token_that_goes_back_is_a_violation_of_that_shard() -> None:
    versions = [
        sv("a", 0, {0: (2, 30), 1: (2, 31)}),
        sv("a", 2, {}),
        sv("b", 3, {0: (5, 29), 1: (5, 40)}),  # shard 0 went back from 30 to 29
    ]
    (violation,) = run(versions).violations
    assert violation.kind == "fencing" and violation.shard == 0 and violation.who == ("a", "b")


def test_the_same_token_on_two_shards_is_not_a_violation() -> None:
    # Each shard is its own order: shard 1's 30 after shard 0's 30 (and 35) says nothing.
    versions = [
        sv("a", 0, {0: (2, 30)}),
        sv("b", 0, {1: (2, 30)}),
        sv("a", 2, {}),
        sv("b", 2.5, {0: (4, 35), 1: (4, 30)}),
    ]
    report = run(versions)
    assert report.violations == []
    assert report.shard_acquisitions == 3


def test_each_shard_has_its_own_gaps_and_a_sharded_runs_top_level_claims_nothing() -> None:
    # shard 0 is owned throughout; shard 1 has no owner from 2 (a killed) to 5 (b takes it).
    versions = [
        sv("a", 0, {0: (30, 10), 1: (2, 11)}, shards=2),
        sv("b", 5, {1: (30, 20)}, shards=2),
    ]
    report = run(versions, faults=[Fault("sigkill", "c", T + 1, T + 1.5)])
    assert report.claims == [] and report.violations == []
    (gap,) = report.gaps
    assert gap.shard == 1 and gap.length == 3 and gap.causes[0].kind == "sigkill"


def test_a_plain_election_counts_its_tokens_as_one_shards_acquisitions() -> None:
    versions = [*term("a", 0, 2, 3), v("a", 2.5, True, 4, token=3), v("b", 5, True, 7, token=4)]
    report = run(versions)
    assert report.shards == 0 and report.shard_acquisitions == 2 and report.acquisitions == 3
    assert "1 shard: the plain election" in report.summary()


def test_shard_versions_read_each_shard_through_its_entry() -> None:
    (a,) = [sv("a", 0, {1: (2, 7)}, shards=2)]
    per = shard_versions([a, v("plain", 0, True, 2)])  # a plain file says nothing of shards
    assert sorted(per) == [0, 1]
    assert [(x.who, x.is_leader, x.fencing_token) for x in per[1]] == [("a", True, 7)]
    assert [(x.who, x.is_leader) for x in per[0]] == [("a", False)]
    assert a.owns(T + 1) == [1] and a.owns(T + 2) == []


def test_a_shards_step_downs_are_counted_by_reason_not_by_shard_or_pod() -> None:
    logs = [
        (T + 1, "a", "stepped down: shard moves to b (leader-main-shard-3)"),
        (T + 2, "a", "stepped down: shard moves to c (leader-main-shard-4)"),
        (T + 3, "b", "stepped down: renew deadline passed (leader-main-shard-3)"),
    ]
    report = run([sv("a", 0, {})], logs=logs)
    assert report.step_downs == {"the shard moves to another pod": 2, "renew deadline passed": 1}
