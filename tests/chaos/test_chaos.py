"""The short chaos run (CI): every fault kind at least once, then random ones.

``GRELMICRO_CHAOS_SECONDS`` (default 100) and ``GRELMICRO_CHAOS_SEED`` tune it;
the long run is ``python -m tests.chaos --minutes 30``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.cluster import ControlPlane

from .harness import CHEAP_KINDS, KINDS, ChaosRun, Outcome, Timings

SECONDS = float(os.environ.get("GRELMICRO_CHAOS_SECONDS", "100"))
SEED = int(os.environ["GRELMICRO_CHAOS_SEED"]) if os.environ.get("GRELMICRO_CHAOS_SEED") else None


def _played(run: ChaosRun, tmp_path: Path, seconds: float, **how: Any) -> tuple[Outcome, str]:
    """``run`` played for ``seconds`` (every kind first, then ``how``'s menu), its report
    printed and kept in ``tmp_path``; aborted (every process stopped) if anything raises."""
    try:
        run.start()
        run.run(seconds, every_kind_first=True, **how)
        outcome = run.finish()
    except BaseException:
        run.abort()
        raise
    text = f"seed {run.seed}\n{outcome.summary()}"
    print(text)
    (tmp_path / "chaos-report.txt").write_text(text)
    return outcome, text


def test_short_chaos_run(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    timings = Timings(lease=3.0, renew=2.0, retry=0.5)
    run = ChaosRun(
        cluster,
        namespace,
        tmp_path,
        sidecars=4,
        timings=timings,
        seed=SEED,
        churn_seconds=(4.0, 6.0),
    )
    outcome, text = _played(run, tmp_path, SECONDS, menu=CHEAP_KINDS, handovers=5)
    report = outcome.report

    # (a) safety: never two claims at once (the rule is in checker.py), no torn file.
    assert not report.violations, text
    # (b) liveness: after every fault has cleared, a leader is back within
    # lease + 4 retry periods (the longest follower backoff) + 3 s of slack for
    # a loaded 2-core machine; and the run ends with a leader.
    bound = timings.lease + 4 * timings.retry + 3.0
    worst = report.max_recovery
    assert worst is None or worst.recovery <= bound, text
    assert outcome.extra["leader_after_healing"] is not None, text
    # (c) no crash, no traceback, no error log, graceful exits in time, no leak.
    assert not outcome.crashes, text
    assert not outcome.log_problems, text
    assert all(s < 10.0 for s in outcome.shutdown_seconds.values()), text
    witness = [t for t in report.trends if t.who == run.witness]
    assert witness, f"no resource trend for the witness\n{text}"
    for trend in report.trends:
        assert trend.fd_growth <= 3, text
        assert trend.rss_growth_kb <= 4 * 1024, text
    # The run exercised what it claims to.
    assert set(report.faults) == set(KINDS), text
    assert run.joined >= 1 and run.retired, f"the churn started or stopped nobody\n{text}"
    assert report.acquisitions >= 6 and report.handovers >= 4, text


#: The sharded case's faults: the processes and the roster (the scale fault), which move
#: shards. The network's (partition, reset, drop, delay) are the long run's, which has the
#: time for every kind: a move whose release a broken link fails (9db6d79) among them.
SHARD_KINDS = ("sigkill", "sigterm", "sigstop", "sigstop-short", "churn", "deleted-paused")


def test_short_sharded_chaos_run(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    """Issue 40, item 4: 6 shards over 2 to 4 pods, each shard judged as an election."""
    timings = Timings(lease=2.0, renew=1.5, retry=0.3)
    run = ChaosRun(
        cluster,
        namespace,
        tmp_path,
        sidecars=3,
        timings=timings,
        seed=SEED,
        churn_seconds=(4.0, 6.0),
        shards=6,
        population=(2, 4),
    )
    menu = (*SHARD_KINDS, "churn", "churn")
    outcome, text = _played(run, tmp_path, min(SECONDS, 60.0), menu=menu, kinds=SHARD_KINDS)
    report = outcome.report
    assert report.shards == 6, text
    assert not report.violations, text  # never two apps on one shard, tokens rise per shard
    bound = timings.lease + 4 * timings.retry + 3.0
    worst = report.max_recovery
    assert worst is None or worst.recovery <= bound, text
    assert not outcome.crashes, text
    assert not outcome.log_problems, text
    assert set(report.faults) == set(SHARD_KINDS), text
    assert report.shard_acquisitions >= 20 and sum(report.shard_handovers.values()) >= 10, text
