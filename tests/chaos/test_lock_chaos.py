"""``lock`` under chaos (``lock_run``): no two commands ever run at once, and the runs go on.

A minute of faults on the process whose command runs: SIGSTOP of the lock
process or of its guard, SIGKILL, SIGTERM, an API partition. Each command is a
process tree whose heartbeat child ignores SIGTERM and may leave the process
group or be orphaned. The heartbeats prove when each command ran.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.chaos.lock_run import LockChaos, Run, overlaps
from tests.cluster import ControlPlane


def test_no_two_commands_ever_run_at_once_under_faults(
    cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("LOCK_CHAOS_SEED") or random.randrange(1 << 30))  # to replay one
    report = LockChaos(cluster, namespace, tmp_path, seed).run(60)
    print(f"seed {seed}: {report.summary()}")
    assert not report.overlaps, (seed, report.overlaps)
    assert len(report.runs) >= 5, (seed, report.summary())
    assert sum(report.faults.values()) >= 10, (seed, report.summary())
    assert not report.tracebacks, f"seed {seed}:\n" + "\n".join(report.tracebacks)
    assert not report.leftovers, (seed, report.summary())


def test_the_overlap_check_sees_an_overlap_and_ignores_back_to_back_runs() -> None:
    a, b = Run("lock-0", 0.0, 1.0, "1"), Run("lock-1", 0.99, 2.0, "2")
    assert overlaps([a, b]) == [(a, b)]
    c = Run("lock-1", 1.0, 2.0, "2")
    assert overlaps([a, c]) == []
    same = Run("lock-0", 0.5, 1.5, "1")  # the same lock's own runs are not compared
    assert overlaps([a, same]) == []
