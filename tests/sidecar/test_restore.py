"""etcd restored from a backup: resourceVersions go back, and the sidecars recover (issue 12 item 3).

A read (a quorum list) that returns an older version than the sidecar knows
used to be dropped as "a late watch event": the sidecar stayed stale and read
again at once, forever, and nobody led until the cluster's revision passed the
old one. Now the read is believed, everyone waits one lease duration (whoever
led after the backup may still be publishing), and one leads again.

A control plane of its own: restoring the shared one would take every other
test's objects back in time.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, leaders, wait_for


@pytest.fixture
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cluster = ControlPlane(tmp_path_factory.mktemp("restore-plane"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _sidecar_requests(plane: ControlPlane, since: dt.datetime, until: dt.datetime) -> int:
    """Lease requests the sidecars made in [since, until), from the API server's audit log."""
    count = 0
    for event in plane.audit_events():
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") != "watch"
            and "/leases" in event.get("requestURI", "")
            and event.get("userAgent", "").startswith("grelmicro-sidecar/")
        ):
            at = dt.datetime.fromisoformat(event["requestReceivedTimestamp"])
            count += since <= at < until
    return count


def test_after_a_restore_one_leads_again_within_a_lease_and_nobody_reads_in_a_loop(
    plane: ControlPlane, tmp_path: Path
) -> None:
    procs = [
        SidecarProcess(tmp_path, plane.kubeconfig, "default", name).start()
        for name in ("pod-a", "pod-b")
    ]
    try:
        wait_for(lambda: leaders(procs), 30, what="a leader")
        plane.backup_etcd(tmp_path / "etcd-backup")
        wait_for(lambda: leaders(procs), 30, what="a leader after the backup")
        time.sleep(8)  # renewals move the Lease (and the revision) past the backup's
        plane.restore_etcd(tmp_path / "etcd-backup")
        answering = dt.datetime.now(dt.UTC)
        took = None
        while (elapsed := (dt.datetime.now(dt.UTC) - answering).total_seconds()) < 15:
            if len(leaders(procs)) == 1:
                took = elapsed
                break
            time.sleep(0.1)
        time.sleep(max(0.0, 11 - (dt.datetime.now(dt.UTC) - answering).total_seconds()))
        requests = _sidecar_requests(plane, answering, answering + dt.timedelta(seconds=10))
        print(f"\nleader again after {took} s; {requests} lease requests in 10 s from 2 sidecars")
        # 3 s lease: one leads again within about a lease of the API server answering.
        assert took is not None, f"no leader 15 s after the restore; {requests} requests in 10 s"
        # A leader renews every second and followers only watch: tens, not thousands.
        assert requests <= 80, f"{requests} lease requests in 10 s from 2 sidecars"
        time.sleep(5)
        assert len(leaders(procs)) == 1
        noticed = [
            line
            for proc in procs
            for line in proc.logs()
            if "went back in time" in line.get("msg", "")
        ]
        assert noticed, [proc.raw_log()[-2000:] for proc in procs]
        # The new leader claimed only after a lease duration from when it saw the rollback.
        (leader,) = [p for p in procs if p.identity in leaders(procs)]
        lines = leader.logs()
        saw = next(line["ts"] for line in lines if "went back in time" in line.get("msg", ""))
        led = [line["ts"] for line in lines if line.get("msg") == "leading"][-1]
        waited = (dt.datetime.fromisoformat(led) - dt.datetime.fromisoformat(saw)).total_seconds()
        print(f"{leader.identity} saw the rollback and led {waited:.2f} s later")
        assert waited >= 3.0, (saw, led)
    finally:
        for proc in procs:
            proc.stop()
