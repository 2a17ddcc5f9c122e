"""``lock`` when a process of its command outlives SIGKILL (contract §7), on the real API server.

A process stuck in the kernel (here a ``stat`` on a FUSE mount whose server
never answers: ``tests.sidecar.stuck``) is not ended by SIGKILL. ``lock``
gives up on it at ``valid_until``; a release then would let a successor lead
at once, beside it, where the Lease's expiry keeps the successor out until a
lease duration after the last renewal it saw. So ``lock`` leaves the Lease to
expire: nobody gets in sooner than if ``lock`` itself had been killed.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for
from tests.sidecar.stuck import FUSE_LOOKUP, StuckMount
from tests.sidecar.test_lock import guard_of, lease

Spawn = Callable[..., SidecarProcess]
LEASE = 6.0
#: A lease well past the renew deadline: the follower's takeover comes seconds after lock's
#: exit, and the Lease read at that exit still shows lock's last renewal.
TIMING = (f"--lease-duration={LEASE:.0f}s", "--renew-deadline=2s", "--retry-period=500ms")


@pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/dev/fuse")
    or not all(shutil.which(tool) for tool in ("unshare", "nsenter", "stat")),
    reason="a FUSE mount in a mount namespace of its own needs root, /dev/fuse, unshare, nsenter",
)
def test_a_process_that_outlives_sigkill_leaves_the_lease_to_expire_unreleased(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The guard is killed, so the tree is lock's to end; its one process is stuck past
    SIGKILL. lock gives up at valid_until and exits 1 without releasing the Lease: the
    follower leads only once the Lease has expired, a lease duration after its last renewal."""
    with StuckMount(tmp_path) as mount:
        a = spawn("pod-a", command=mount.command(), extra=TIMING)
        mount.until_request(FUSE_LOOKUP, 30)  # the command runs (so pod-a leads), and is stuck
        b = spawn("pod-b", extra=TIMING)
        wait_for(lambda: ("holder changed", "pod-a") in _said(b), 20, what="pod-b following")
        os.kill(guard_of(a), signal.SIGKILL)
        assert a.wait(30) == 1, a.raw_log()[-3000:]
        assert "processes of the command still run at valid_until" in a.messages()
        spec = lease(cluster, namespace)["spec"]
        assert spec.get("holderIdentity") == "pod-a", f"released beside a live process: {spec}"
        assert "released lease" not in a.messages()
        assert "lease left to expire, not released" in a.messages(), a.raw_log()[-3000:]
        wait_for(b.leads, 30, what="pod-b to take over once the Lease expired")
        led = next(_ts(r) for r in b.logs() if r.get("msg") == "leading")
        expiry = _ts({"ts": spec["renewTime"]}) + LEASE
        assert led >= expiry - 0.05, f"pod-b led {expiry - led:.2f}s before the Lease expired"


def _said(proc: SidecarProcess) -> list[tuple[str, str]]:
    return [(str(r.get("msg")), str(r.get("holder"))) for r in proc.logs()]


def _ts(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00")).timestamp()
