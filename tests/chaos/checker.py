"""The chaos checker: from what the sidecars published, prove the safety and liveness claims.

Pure: it takes records (file versions, probe answers, faults, resource
samples, log lines) and returns a report; the recorder that produces them
lives in ``recorder.py``. Every time is wall-clock seconds (``time.time()``),
which all processes of a run share because they run on one host.

The rule for "claims leadership" (the consumer rule of docs/reliability.md)
--------------------------------------------------------------------------
A sidecar's state file goes through versions v1, v2, ... with ``updated_at``
u1 < u2 < ... (its own wall clock when it wrote them; a restarted process of
the same identity continues the same sequence, since it writes the same
file). Version i *claims* over the half-open interval

    [u_i, min(valid_until_i, u_{i+1}))      when is_leader_i is true,

and nothing otherwise. That is what an application sees if it follows the
rule: re-read the file, act as leader only while ``is_leader`` and
``now < valid_until``. A paused or dead sidecar's last file keeps claiming
until its ``valid_until``: nothing else ends it.

Why ``u_{i+1}`` and not the instant the recorder first saw v_{i+1}: the
recorder samples every ~10 ms and a loaded machine can delay it further, so
"first seen" is late by an unknown amount, which would invent overlaps at
every graceful handover (the old leader writes "not leader", releases, and a
follower takes over within milliseconds). ``u_{i+1}`` is earlier than the
rename that ends v_i by one write+fsync; a handover is causal (the successor
acts on a Lease write that the predecessor made *after* its "not leader"
file was renamed into place), so the successor's ``updated_at`` is later
than that rename, and the nominal intervals never overlap in a correct run.

Violations:

1. *file/file*: two sidecars' claim intervals overlap (any positive length);
2. *probe/file*: a ``/leader`` 200 whose body was computed at ``u`` (its
   ``updated_at``) while another sidecar's file claims at ``u``;
3. *fencing*: a claim by another sidecar than the previous claimant whose
   ``fencing_token`` is not larger than every token claimed before it (a new
   leader must be orderable after all earlier ones);
4. *torn*: a state file that existed but did not parse (the atomic replace
   failed).

Each violation comes with a timeline of everything within a few seconds.

Sharded elections (``run --shards=N``, issue 40)
------------------------------------------------
A sharded sidecar's file says ``is_leader`` for "owns any" and lists every
shard in ``shards``, each with its own ``is_leader``, ``valid_until`` and
``fencing_token``; an app acts on shard s only while s's entry says
``is_leader`` with ``valid_until`` ahead. So each shard is judged as an
election of its own: its versions are the files' versions read through s's
entry (``shard_versions``), with the same claim rule, and violations 1 and 3
apply per shard (two apps on one shard at one instant; a shard's token not
above every token claimed on that shard before it). The same token on two
shards is nothing: each shard is its own order. Leaderless gaps are each
shard's. A 1-shard election is the plain election (no ``shards`` list): it
is judged on the top-level fields as ever, and its claims' tokens count as
the one shard's acquisitions.

*Shard acquisitions*: each (shard, fencing token) that some app acted on,
once, however many versions and renewals carried it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import statistics
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from sidecar.core.shards import SHARD_INFIX


def parse_ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def fmt(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class ShardEntry:
    """One shard's entry in a sharded sidecar's state.json (``shards``)."""

    shard: int
    is_leader: bool
    valid_until: float | None
    holder: str | None = None
    fencing_token: int | None = None
    #: The token of the drain under way for this shard, if any (the app may acknowledge it).
    drain: int | None = None

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> ShardEntry:
        drain = entry.get("drain")
        token = drain.get("token") if isinstance(drain, dict) else None
        return cls(
            shard=int(entry["shard"]),
            is_leader=entry.get("is_leader") is True,
            valid_until=parse_ts(entry.get("valid_until")),
            holder=entry.get("holder"),
            fencing_token=entry.get("fencing_token"),
            drain=token if isinstance(token, int) else None,
        )


@dataclass(frozen=True)
class FileVersion:
    """One version of one sidecar's state.json, as the recorder read it."""

    who: str
    seen: float  # when the recorder first read this version
    updated_at: float
    is_leader: bool
    valid_until: float | None
    holder: str | None = None
    fencing_token: int | None = None
    #: A sharded election's shards (None: a plain election's file).
    shards: tuple[ShardEntry, ...] | None = None

    @classmethod
    def from_state(cls, who: str, seen: float, state: dict[str, Any]) -> FileVersion:
        shards = state.get("shards")
        return cls(
            who=who,
            seen=seen,
            updated_at=parse_ts(state.get("updated_at")) or seen,
            is_leader=state.get("is_leader") is True,
            valid_until=parse_ts(state.get("valid_until")),
            holder=state.get("holder"),
            fencing_token=state.get("fencing_token"),
            shards=(
                tuple(ShardEntry.from_entry(e) for e in shards)
                if isinstance(shards, list)
                else None
            ),
        )

    def owns(self, at: float) -> list[int]:
        """The shards this version tells its app to act on at ``at`` (a sharded file)."""
        return [
            e.shard
            for e in self.shards or ()
            if e.is_leader and e.valid_until is not None and e.valid_until > at
        ]


@dataclass(frozen=True)
class Probe:
    """One ``GET /leader``: status 0 means no answer (refused, timed out)."""

    who: str
    sent: float
    answered: float
    status: int
    updated_at: float | None = None
    valid_until: float | None = None


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    end: float
    detail: str = ""


@dataclass(frozen=True)
class Resource:
    who: str
    pid: int
    t: float
    fds: int
    rss_kb: int


@dataclass(frozen=True)
class Claim:
    who: str
    start: float
    end: float
    version: FileVersion


@dataclass
class Violation:
    kind: str
    start: float
    end: float
    who: tuple[str, ...]
    detail: str
    timeline: str = ""
    #: The shard it was found on (None: the plain election, or the run as a whole).
    shard: int | None = None

    @property
    def width(self) -> float:
        return self.end - self.start


@dataclass
class Gap:
    start: float
    end: float
    causes: list[Fault]
    #: The shard that had no owner (None: the plain election).
    shard: int | None = None

    @property
    def length(self) -> float:
        return self.end - self.start

    @property
    def recovery(self) -> float:
        """How long the gap lasted after the last fault that overlaps it had cleared."""
        cleared = max([self.start, *(f.end for f in self.causes)])
        return max(0.0, self.end - cleared)


@dataclass
class Trend:
    who: str
    pid: int
    samples: int
    seconds: float
    fds_start: float
    fds_end: float
    fds_max: int
    rss_start_kb: float
    rss_end_kb: float

    @property
    def fd_growth(self) -> float:
        return self.fds_end - self.fds_start

    @property
    def rss_growth_kb(self) -> float:
        return self.rss_end_kb - self.rss_start_kb


@dataclass
class Report:
    lease_duration: float
    claims: list[Claim]
    violations: list[Violation]
    gaps: list[Gap]
    trends: list[Trend]
    faults: Counter[str]
    acquisitions: int
    handovers: int
    step_downs: Counter[str]
    torn_reads: int
    probes: Counter[str] = field(default_factory=Counter)
    #: with sidecars whose tokens are not judged: how often the token went back
    #: once theirs are counted too (an older version's token means something else)
    unjudged_fencing: int | None = None
    #: a sharded election: how many shards were judged (0: a plain one)
    shards: int = 0
    #: each (shard, fencing token) an app acted on, once (a plain election: its tokens)
    shard_acquisitions: int = 0
    #: each shard's handovers between identities (a sharded election)
    shard_handovers: Counter[int] = field(default_factory=Counter)

    @property
    def max_gap(self) -> Gap | None:
        return max(self.gaps, key=lambda g: g.length, default=None)

    @property
    def max_recovery(self) -> Gap | None:
        return max(self.gaps, key=lambda g: g.recovery, default=None)

    def summary(self) -> str:
        lines = [
            f"faults injected: {sum(self.faults.values())} "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())),
            f"leadership: {self.acquisitions} acquisitions, {self.handovers} handovers between "
            f"identities; step-downs: "
            + (", ".join(f"{k}={v}" for k, v in sorted(self.step_downs.items())) or "none"),
            "probes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.probes.items())),
            self._shard_line(),
            f"violations: {len(self.violations)} (torn reads: {self.torn_reads})",
        ]
        if self.unjudged_fencing is not None:
            lines.append(
                f"not judged: {self.unjudged_fencing} fencing-token steps back across versions "
                "(an older sidecar's token is leaseTransitions, not a resourceVersion)"
            )
        gap, rec = self.max_gap, self.max_recovery
        if gap is not None and rec is not None:
            lines.append(
                f"leaderless gaps: {len(self.gaps)}; longest {gap.length:.2f}s "
                f"({gap.length / self.lease_duration:.2f} × lease {self.lease_duration:g}s)"
                f"{'' if gap.shard is None else f' on shard {gap.shard}'} at "
                f"{fmt(gap.start)} after [{', '.join(f.kind + ':' + f.target for f in gap.causes) or 'no fault'}]; "
                f"longest after the fault cleared {rec.recovery:.2f}s "
                f"({rec.recovery / self.lease_duration:.2f} × lease"
                f"{'' if rec.shard is None else f', shard {rec.shard}'})"
            )
        for t in self.trends:
            lines.append(
                f"resources {t.who} pid {t.pid} over {t.seconds:.0f}s ({t.samples} samples): "
                f"most fds open {t.fds_start:.0f} (early) -> {t.fds_end:.0f} (late), "
                f"RSS {t.rss_start_kb / 1024:.1f} -> {t.rss_end_kb / 1024:.1f} MiB"
            )
        for v in self.violations:
            lines.append(
                f"VIOLATION {v.kind}{'' if v.shard is None else f' on shard {v.shard}'} "
                f"{v.who} {fmt(v.start)}..{fmt(v.end)} "
                f"({v.width * 1000:.0f} ms): {v.detail}\n{v.timeline}"
            )
        return "\n".join(lines)

    def _shard_line(self) -> str:
        if not self.shards:
            return (
                f"shard acquisitions: {self.shard_acquisitions} (1 shard: the plain election, "
                "each fencing token acted on once)"
            )
        per = [self.shard_handovers.get(s, 0) for s in range(self.shards)]
        return (
            f"shards: {self.shards}; shard acquisitions: {self.shard_acquisitions} (each shard "
            f"and fencing token acted on, once); handovers per shard: {sum(per)} in all, "
            f"{min(per)} to {max(per)} ({' '.join(str(n) for n in per)})"
        )


# ---- the analysis ------------------------------------------------------------


def claims_of(
    versions: Iterable[FileVersion], lazy: Collection[str] = (), acks: Iterable[Any] = ()
) -> list[Claim]:
    """Claim intervals of one or many sidecars, by the rule in the module docstring.

    ``lazy``: sidecars whose app re-reads the file only now and then, so it may
    act on a claiming version until that version's ``valid_until`` whatever
    the sidecar wrote after it (a restart's "not leader" included): their
    claims are not cut at the next version. ``acks``: (``who``, ``token``,
    ``at``) of apps that said they stopped acting on a term (a drain's
    acknowledgement): a lazy claim of that term ends there."""
    stopped = {(a.who, a.token): a.at for a in acks}
    by_who: dict[str, list[FileVersion]] = {}
    for v in versions:
        by_who.setdefault(v.who, []).append(v)
    out: list[Claim] = []
    for seq in by_who.values():
        seq.sort(key=lambda v: (v.updated_at, v.seen))
        for i, v in enumerate(seq):
            if not v.is_leader or v.valid_until is None:
                continue
            end = v.valid_until
            if i + 1 < len(seq) and v.who not in lazy:
                end = min(end, seq[i + 1].updated_at)
            end = min(end, stopped.get((v.who, v.fencing_token), end))
            if end > v.updated_at:
                out.append(Claim(v.who, v.updated_at, end, v))
    out.sort(key=lambda c: c.start)
    return out


def acquisitions_of(claims: list[Claim]) -> int:
    """How often a sidecar began to lead: a claim that does not continue its previous one."""
    acquisitions = 0
    by_who: dict[str, list[Claim]] = {}
    for c in claims:
        by_who.setdefault(c.who, []).append(c)
    for seq in by_who.values():
        for i, c in enumerate(seq):
            if i == 0 or c.start > seq[i - 1].end + 1e-6:
                acquisitions += 1
    return acquisitions


def token_acquisitions(claims: Iterable[Claim]) -> int:
    """How many terms were acted on: each fencing token claimed, once (a renewal, a new
    version, a re-read carry the same token). One shard's claims, or the plain election's."""
    return len({c.version.fencing_token for c in claims})


def shard_versions(versions: Iterable[FileVersion]) -> dict[int, list[FileVersion]]:
    """Each shard's versions: every sharded file version read through that shard's entry
    (is_leader, valid_until, holder, token), so a shard is judged as a plain election. A
    version without the shard's entry says nothing of it: it does not claim it."""
    out: dict[int, list[FileVersion]] = {}
    sharded = [v for v in versions if v.shards is not None]
    every = sorted({e.shard for v in sharded for e in v.shards or ()})
    for v in sharded:
        entries = {e.shard: e for e in v.shards or ()}
        for shard in every:
            e = entries.get(shard)
            out.setdefault(shard, []).append(
                FileVersion(
                    who=v.who,
                    seen=v.seen,
                    updated_at=v.updated_at,
                    is_leader=e is not None and e.is_leader,
                    valid_until=e.valid_until if e is not None else None,
                    holder=e.holder if e is not None else None,
                    fencing_token=e.fencing_token if e is not None else None,
                )
            )
    return out


def shard_claims(
    versions: Iterable[FileVersion], lazy: Collection[str] = (), acks: Iterable[Any] = ()
) -> dict[int, list[Claim]]:
    """Each shard's claims (``claims_of`` over ``shard_versions``)."""
    acks = list(acks)
    return {s: claims_of(vs, lazy, acks) for s, vs in shard_versions(versions).items()}


def handovers_of(claims: list[Claim]) -> int:
    """How often leadership moved to another identity, claims in order of start."""
    return sum(1 for a, b in itertools.pairwise(claims) if a.who != b.who)


def overlaps(claims: list[Claim]) -> list[Violation]:
    out = []
    for i, a in enumerate(claims):
        for b in claims[i + 1 :]:
            if b.start >= a.end:
                break
            if b.who == a.who:
                continue
            start, end = max(a.start, b.start), min(a.end, b.end)
            if end > start:
                out.append(
                    Violation(
                        "file/file",
                        start,
                        end,
                        (a.who, b.who),
                        f"{a.who} claims {fmt(a.start)}..{fmt(a.end)} (token {a.version.fencing_token}) and "
                        f"{b.who} claims {fmt(b.start)}..{fmt(b.end)} (token {b.version.fencing_token})",
                    )
                )
    return out


def probe_conflicts(claims: list[Claim], probes: Iterable[Probe]) -> list[Violation]:
    out = []
    for p in probes:
        if p.status != 200 or p.updated_at is None:
            continue
        for c in claims:
            if c.who != p.who and c.start <= p.updated_at < c.end:
                out.append(
                    Violation(
                        "probe/file",
                        p.updated_at,
                        p.updated_at,
                        (p.who, c.who),
                        f"/leader of {p.who} answered 200 (computed at {fmt(p.updated_at)}) while "
                        f"{c.who}'s file claims {fmt(c.start)}..{fmt(c.end)}",
                    )
                )
    return out


def fencing(
    claims: list[Claim],
    restores: Iterable[tuple[float, float]] = (),
    untokened: Collection[str] = (),
) -> list[Violation]:
    """Violation 3. ``restores``: (start, end) of each etcd restore without
    ``--bump-revision`` (the backup is taken at its start).

    ``untokened``: sidecars whose tokens are not comparable with the others'
    (an older version whose token is ``leaseTransitions``): their claims are
    left out, and the others' tokens must still rise across them.

    Such a restore takes the cluster's revision back to the backup's, and with it
    the tokens: the contract assumes restores bump the revision, and the harness
    cannot (it has no ``etcdutl``). A claim that starts while one runs may have
    been written to either store (a write answered before the API server stopped
    can be published after), so it is not judged; the order of tokens is checked
    within each stretch between restores. The overlap rules hold across them.
    """
    out = []
    highest: int | None = None
    previous: Claim | None = None
    pending = sorted(restores)
    for c in sorted((c for c in claims if c.who not in untokened), key=lambda c: c.start):
        if any(start <= c.start <= end for start, end in pending):
            continue
        while pending and pending[0][1] < c.start:
            pending.pop(0)
            highest, previous = None, None
        token = c.version.fencing_token
        if (
            previous is not None
            and c.who != previous.who
            and (token is None or (highest is not None and token <= highest))
        ):
            out.append(
                Violation(
                    "fencing",
                    c.start,
                    c.start,
                    (previous.who, c.who),
                    f"{c.who} leads from {fmt(c.start)} with token {token}, not above {highest} "
                    f"(previous leader {previous.who})",
                )
            )
        if token is not None:
            highest = token if highest is None else max(highest, token)
        previous = c
    return out


def gaps_of(
    claims: list[Claim], faults: list[Fault], start: float, end: float, lease: float
) -> list[Gap]:
    """Leaderless intervals within [first claim, end); each with the faults that may explain it.

    A fault explains a gap when it was active during the gap or cleared less
    than one lease duration before it began.
    """
    if not claims:
        return [Gap(start, end, list(faults))] if end > start else []
    merged: list[list[float]] = []
    for c in sorted(claims, key=lambda c: c.start):
        if merged and c.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], c.end)
        else:
            merged.append([c.start, c.end])
    holes = [(a[1], min(b[0], end)) for a, b in itertools.pairwise(merged) if a[1] < end]
    if merged[-1][1] < end:
        holes.append((merged[-1][1], end))
    out = []
    for g0, g1 in holes:
        causes = [f for f in faults if f.start <= g1 and f.end + lease >= g0]
        out.append(Gap(g0, g1, causes))
    return out


#: After a flood of a status port ends, the server has closed its side within this.
FLOOD_SETTLE = 6.0


def trends_of(
    resources: Iterable[Resource],
    warmup: float = 10.0,
    min_seconds: float = 45.0,
    floods: Iterable[Fault] = (),
) -> list[Trend]:
    """Per process, after warm-up: fds as the *most* open in the first 40 % of its life
    against the most in the last 20 % (an API outage closes connections and only
    lowers the count, so the upper envelope is what a leak raises); RSS as the
    median of the first fifth against the median of the last fifth.

    Samples taken while a ``flood`` fault held a sidecar's status port open (up
    to its 32 connections) are not its own growth, and are left out."""
    windows = [(f.target, f.start, f.end + FLOOD_SETTLE) for f in floods]
    by_pid: dict[tuple[str, int], list[Resource]] = {}
    for r in resources:
        if any(r.who == who and start <= r.t <= end for who, start, end in windows):
            continue
        by_pid.setdefault((r.who, r.pid), []).append(r)
    out = []
    for (who, pid), seq in sorted(by_pid.items()):
        seq.sort(key=lambda r: r.t)
        seq = [r for r in seq if r.t >= seq[0].t + warmup]
        if len(seq) < 10 or seq[-1].t - seq[0].t < min_seconds:
            continue
        k = max(3, len(seq) // 5)
        head, tail = seq[:k], seq[-k:]
        early = seq[: max(3, len(seq) * 2 // 5)]
        out.append(
            Trend(
                who=who,
                pid=pid,
                samples=len(seq),
                seconds=seq[-1].t - seq[0].t,
                fds_start=max(r.fds for r in early),
                fds_end=max(r.fds for r in tail),
                fds_max=max(r.fds for r in seq),
                rss_start_kb=statistics.median(r.rss_kb for r in head),
                rss_end_kb=statistics.median(r.rss_kb for r in tail),
            )
        )
    return out


def timeline(
    t: float,
    versions: Iterable[FileVersion],
    probes: Iterable[Probe],
    faults: Iterable[Fault],
    logs: Iterable[tuple[float, str, str]],
    window: float = 4.0,
) -> str:
    """Everything that happened within ``window`` seconds of ``t``, in order."""
    rows: list[tuple[float, str]] = []
    for v in versions:
        if abs(v.updated_at - t) <= window:
            rows.append(
                (
                    v.updated_at,
                    f"{v.who:>8} file   is_leader={v.is_leader!s:5} "
                    f"valid_until={fmt(v.valid_until) if v.valid_until else '-':12} "
                    f"holder={v.holder} token={v.fencing_token} (seen {fmt(v.seen)})",
                )
            )
    for p in probes:
        if abs(p.sent - t) <= window and p.status != 503:
            rows.append(
                (
                    p.updated_at or p.sent,
                    f"{p.who:>8} probe  status={p.status} "
                    f"valid_until={fmt(p.valid_until) if p.valid_until else '-'}",
                )
            )
    for f in faults:
        if f.start - window <= t <= f.end + window:
            rows.append(
                (
                    f.start,
                    f"{'chaos':>8} fault  {f.kind} on {f.target} until {fmt(f.end)} {f.detail}",
                )
            )
    for ts, who, msg in logs:
        if abs(ts - t) <= window:
            rows.append((ts, f"{who:>8} log    {msg}"))
    rows.sort(key=lambda r: r[0])
    return "\n".join(
        f"  {fmt(ts)} {'>>' if abs(ts - t) < 0.0005 else '  '} {text}" for ts, text in rows
    )


def check(
    *,
    versions: list[FileVersion],
    probes: list[Probe],
    faults: list[Fault],
    resources: list[Resource],
    logs: list[tuple[float, str, str]],
    start: float,
    end: float,
    lease_duration: float,
    torn_reads: int = 0,
    gaps_until: float | None = None,
    lazy: Collection[str] = (),
    untokened: Collection[str] = (),
    acks: Iterable[Any] = (),
) -> Report:
    """Judge a run. Leaderless gaps are counted up to ``gaps_until`` (the start of
    the final shutdown, after which nobody is meant to lead), violations to ``end``.
    ``lazy``: see ``claims_of``; ``untokened``: see ``fencing``."""
    claims = claims_of(versions, lazy, acks)
    restores = [(f.start, f.end) for f in faults if f.kind == "restore"]
    violations = (
        overlaps(claims) + probe_conflicts(claims, probes) + fencing(claims, restores, untokened)
    )
    unjudged = len(fencing(claims, restores)) - len(fencing(claims, restores, untokened))
    for v in violations:
        v.timeline = timeline(v.start, versions, probes, faults, logs)
    if torn_reads:
        violations.append(Violation("torn", start, start, (), f"{torn_reads} unparsable reads"))
    gaps_end = gaps_until if gaps_until is not None else end
    first = claims[0].start if claims else start
    per_shard = shard_claims(versions, lazy, acks)
    shard_handovers: Counter[int] = Counter()
    if not per_shard:  # a plain election (1 shard)
        gaps = gaps_of(claims, faults, first, gaps_end, lease_duration)
        acquisitions = acquisitions_of(claims)
        handovers = handovers_of(claims)
        shard_acquisitions = token_acquisitions(claims)
    else:  # each shard is an election of its own; the top level claims nothing
        by_shard = shard_versions(versions)
        gaps = []
        for shard, shard_claims_ in sorted(per_shard.items()):
            found = overlaps(shard_claims_) + fencing(shard_claims_, restores, untokened)
            for x in found:
                x.shard = shard
                x.detail = f"shard {shard}: {x.detail}"
                x.timeline = timeline(x.start, by_shard[shard], [], faults, _of_shard(logs, shard))
            violations += found
            since = shard_claims_[0].start if shard_claims_ else start
            gaps += [
                dataclasses.replace(g, shard=shard)
                for g in gaps_of(shard_claims_, faults, since, gaps_end, lease_duration)
            ]
            shard_handovers[shard] = handovers_of(shard_claims_)
        acquisitions = sum(acquisitions_of(c) for c in per_shard.values())
        handovers = sum(shard_handovers.values())
        shard_acquisitions = sum(token_acquisitions(c) for c in per_shard.values())
    step_downs: Counter[str] = Counter()
    for _ts, _who, msg in logs:
        if msg.startswith("stepped down: "):
            reason = msg.removeprefix("stepped down: ")
            if SHARD_INFIX in reason and reason.endswith(")"):  # a shard's: "... (its Lease)"
                reason = reason.rsplit(" (", 1)[0]
            if reason.startswith("the Lease now names"):
                reason = "the Lease now names another holder"
            elif reason.startswith("shard moves to "):
                reason = "the shard moves to another pod"
            step_downs[reason] += 1
    probe_counts: Counter[str] = Counter(
        {200: "200", 503: "503", 0: "no answer"}.get(p.status, str(p.status)) for p in probes
    )
    return Report(
        lease_duration=lease_duration,
        claims=claims,
        violations=violations,
        gaps=gaps,
        trends=trends_of(resources, floods=[f for f in faults if f.kind == "flood"]),
        faults=Counter(f.kind for f in faults),
        acquisitions=acquisitions,
        handovers=handovers,
        step_downs=step_downs,
        torn_reads=torn_reads,
        probes=probe_counts,
        unjudged_fencing=max(0, unjudged) if untokened else None,
        shards=len(per_shard),
        shard_acquisitions=shard_acquisitions,
        shard_handovers=shard_handovers,
    )


def _of_shard(logs: Iterable[tuple[float, str, str]], shard: int) -> list[tuple[float, str, str]]:
    """The log events of one shard's timeline: those of its Lease, and those of no shard's."""
    mine = f"{SHARD_INFIX}{shard})"
    return [e for e in logs if SHARD_INFIX not in e[2] or e[2].endswith(mine)]
