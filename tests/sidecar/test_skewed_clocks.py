"""Node clocks that are off: sweeps never trust them (contract §5), and the sidecar reports them.

A node clock 10 minutes ahead makes every renewed Lease look long expired by
``renewTime + leaseDurationSeconds``. The resourceVersion precondition does
not help: nothing changed between the sweeper's list and its delete. What
the sweeper can trust is its own monotonic clock: a Lease it has seen
unchanged for ``leaseDurationSeconds + margin`` is abandoned, whatever any
clock says; one whose resourceVersion keeps moving is alive.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sidecar.core import roster
from tests.cluster import ControlPlane
from tests.metrics import samples
from tests.sidecar.proc import BIN, SidecarProcess, wait_for
from tests.skew import skewed_clock

Spawn = Callable[..., SidecarProcess]
MANAGED = {"app.kubernetes.io/managed-by": "grelmicro"}
AHEAD = 600  # seconds: the 10 minutes the issue measured


def _abandoned(coord: Any, namespace: str, name: str, duration: int) -> None:
    """A managed Lease whose holder is gone: last renewed 10 minutes ago, by any clock."""
    coord.create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=name, labels=MANAGED),
            spec=client.V1LeaseSpec(
                holder_identity="gone-pod",
                lease_duration_seconds=duration,
                renew_time=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10),
            ),
        ),
    )


def _live_and_dead(spawn: Spawn, coord: Any, namespace: str) -> tuple[SidecarProcess, str]:
    """A leader renewing leader-busy (and its uid), and leader-dead abandoned 10 minutes ago."""
    live = spawn("live-leader", election="busy")
    wait_for(live.leads, 20, what="the live election's leader")
    _abandoned(coord, namespace, "leader-dead", duration=3)
    return live, _uid(coord, namespace, "leader-busy")


def _uid(coord: Any, namespace: str, name: str) -> str:
    return str(coord.read_namespaced_lease(name, namespace).metadata.uid)


def test_shutdown_sweep_with_a_clock_ahead_spares_live_leases_and_still_sweeps_dead_ones(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    coord = client.CoordinationV1Api(api)
    # The skewed sidecar, started second, must be the one that sweeps: it holds the
    # namespace's sweep duty (contract §5) from before the live leader starts.
    until = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    coord.create_namespaced_lease(
        namespace, roster.new_object(namespace, roster.duty_value("ahead", until))
    )
    live, live_uid = _live_and_dead(spawn, coord, namespace)

    sweeper = spawn("ahead", election="other", env=skewed_clock(AHEAD))
    wait_for(sweeper.leads, 30, what="the skewed sidecar to lead its own election")
    state = sweeper.state()
    assert state is not None
    skew = dt.datetime.fromisoformat(state["updated_at"]) - dt.datetime.now(dt.UTC)
    assert skew > dt.timedelta(seconds=AHEAD - 30), f"the sidecar's clock is not ahead: {skew}"
    # The dead Lease must stay unchanged under its eyes for duration (3 s) + margin (60 s).
    time.sleep(3 + 60 + 3 - (time.monotonic() - sweeper.started_at))
    sweeper.signal(signal.SIGTERM)
    assert sweeper.wait(30) == 0
    deleted = [
        line.get("lease")
        for line in sweeper.logs()
        if line.get("msg") == "sweep: deleted expired lease"
    ]
    assert deleted == ["leader-dead"], sweeper.raw_log()[-3000:]
    assert live.leads()
    assert _uid(coord, namespace, "leader-busy") == live_uid, "the live Lease was deleted"


def test_cleanup_with_a_clock_ahead_spares_live_leases_and_still_sweeps_dead_ones(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str
) -> None:
    coord = client.CoordinationV1Api(api)
    live, live_uid = _live_and_dead(spawn, coord, namespace)
    started = time.monotonic()
    out = subprocess.run(
        [
            str(BIN),
            "cleanup",
            f"--namespace={namespace}",
            f"--kubeconfig={cluster.kubeconfig}",
            "--margin=5s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **skewed_clock(AHEAD)},
    )
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert "deleted 1 expired lease(s)" in out.stdout, (out.stdout, out.stderr)
    # It watched the candidates for duration + margin (3 s + 5 s) before deleting.
    assert took >= 8, took
    managed = coord.list_namespaced_lease(
        namespace, label_selector="app.kubernetes.io/managed-by=grelmicro"
    ).items
    assert {i.metadata.name for i in managed} == {"leader-busy"}
    assert _uid(coord, namespace, "leader-busy") == live_uid, "the live Lease was deleted"
    assert live.leads()
    assert "Traceback" not in out.stderr, out.stderr


def test_a_clock_off_by_more_than_tolerated_is_reported_once_and_measured(spawn: Spawn) -> None:
    ahead = spawn("ahead", election="one", env=skewed_clock(AHEAD))
    right = spawn("right", election="two")
    for proc in (ahead, right):
        wait_for(proc.leads, 30, what=f"{proc.identity} to lead")
    time.sleep(2)  # a few more renewals, each answer carrying a Date

    def skew(proc: SidecarProcess) -> float:
        status, text = proc.http("/metrics")
        assert status == 200, text
        lease = {"ahead": "leader-one", "right": "leader-two"}[proc.identity]
        return samples(text)[f'grelmicro_sidecar_clock_skew_seconds{{name="{lease}"}}']

    assert AHEAD - 3 < skew(ahead) < AHEAD + 3
    assert abs(skew(right)) < 2
    warned = [line for line in ahead.logs() if "clock is off" in line.get("msg", "")]
    assert len(warned) == 1, warned  # once, not once per request
    assert warned[0]["tolerated_seconds"] == 1.0  # FAST: lease 3 s - renew deadline 2 s
    assert AHEAD - 3 < warned[0]["skew_seconds"] < AHEAD + 3
    assert not [line for line in right.logs() if "clock is off" in line.get("msg", "")]
