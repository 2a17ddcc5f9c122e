"""Real sidecar processes against the real API server (contract §2-5, 7)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from sidecar.core import roster
from tests import accounts
from tests.cluster import ControlPlane
from tests.metrics import samples
from tests.sidecar.proc import BIN, SidecarProcess, leaders, wait_for

Spawn = Callable[..., SidecarProcess]


def _ts(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00")).timestamp()


def _first(proc: SidecarProcess, msg: str) -> dict[str, Any]:
    return next(r for r in proc.logs() if r.get("msg") == msg)


def _lease(api: Any, namespace: str, name: str = "leader-main") -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)


def _sidecars_ran_here_before(api: Any, namespace: str, lease_duration: float) -> None:
    """The namespace's coordination Lease, there for longer than ``lease_duration``: only then
    does a missing mark prove a brand-new election (contract §2; issue 38: one absent or
    younger may have been deleted with the marks, and the first candidate waits a lease)."""
    coord = client.CoordinationV1Api(api)
    meta = client.V1ObjectMeta(name=roster.NAME, labels=roster.LABELS)
    made = coord.create_namespaced_lease(namespace, client.V1Lease(metadata=meta))
    time.sleep(
        max(0.0, made.metadata.creation_timestamp.timestamp() + lease_duration + 2 - time.time())
    )


def test_a_new_elections_first_candidate_leads_at_once_and_all_views_agree(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str
) -> None:
    _sidecars_ran_here_before(api, namespace, 15)
    a = spawn("pod-a", extra=())  # default timings 15s/10s/2s
    wait_for(a.leads, 30, what="pod-a to lead")
    # A brand-new election (no Lease ever, no mark of one): no term can still be vouched
    # for, so it leads within a second of starting, not a lease duration (issue 28 item 1).
    assert _ts(_first(a, "leading")) - _ts(_first(a, "starting")) < 1.0
    # How long its start took, and the CPU it used: what a contended pod start costs.
    starting = _first(a, "starting")
    assert 0 < starting["cpu_seconds"] <= starting["started_in"] + 0.05 < 30, starting

    state = a.state()
    assert state is not None
    assert state["is_leader"] is True and state["holder"] == "pod-a"
    # The token is the resourceVersion of the create that made pod-a leader (contract §2).
    created = _lease(api, namespace)
    assert 0 < state["fencing_token"] <= int(created.metadata.resource_version)
    assert created.spec.lease_transitions == 0
    assert (state["election"], state["lease"], state["namespace"], state["identity"]) == (
        "main",
        "leader-main",
        namespace,
        "pod-a",
    )
    status, body = a.http("/leader")
    assert status == 200 and body["is_leader"] is True and body["holder"] == "pod-a"
    status, body = a.http("/status")
    assert status == 200 and body["name"] == "pod-a"
    assert a.http("/healthz")[0] == 200
    status, metrics = a.http("/metrics")
    assert status == 200
    parsed = samples(metrics)
    assert parsed['leader_election_master_status{name="leader-main"}'] == 1
    assert parsed['grelmicro_sidecar_leader_acquisitions_total{name="leader-main"}'] >= 1
    # What the alerts compare (docs/monitoring.md, "Alerts"): the election's timing, how long since
    # the Lease last changed (the leader renews every renew deadline / 2 = 5 s), and
    # when this process started.
    assert parsed['grelmicro_sidecar_lease_duration_seconds{name="leader-main"}'] == 15
    assert parsed['grelmicro_sidecar_renew_deadline_seconds{name="leader-main"}'] == 10
    assert 0 <= parsed['grelmicro_sidecar_lease_unchanged_seconds{name="leader-main"}'] < 6
    spawned = time.time() - (time.monotonic() - a.started_at)
    assert abs(parsed["process_start_time_seconds"] - spawned) < 2

    table = cluster.kubectl("get", "leases", "-n", namespace).stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "HOLDER"]
    # Plain kubectl get leases answers "who leads?": the election's Lease, whose HOLDER is
    # the leader, and the namespace's shared one, with no holder (issue 29 item 4).
    rows = sorted(row.split()[:2] for row in table[1:])
    assert rows == [[roster.NAME, rows[0][1]], ["leader-main", "pod-a"]], table
    assert re.fullmatch(r"\d+[smhd]", rows[0][1]), table  # its AGE: no HOLDER column value
    lease = json.loads(
        cluster.kubectl("get", "lease", "leader-main", "-n", namespace, "-o", "json").stdout
    )
    assert lease["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "grelmicro"
    assert lease["spec"]["leaseDurationSeconds"] == 15


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_status_port_answers_on_ipv4_and_ipv6_from_the_one_thread_of_the_process(
    spawn: Spawn,
) -> None:
    """Every interface, both families, as when the port was bound with no address; named by
    address now, so no resolver thread is started to look up "no address" and then idles
    in every pod for the life of the sidecar (it also loaded the thread-pool modules)."""
    a = spawn("pod-a")
    wait_for(lambda: a.http("/healthz")[0] == 200, 30, what="the status port")
    hosts = ["127.0.0.1"] + (["[::1]"] if _ipv6_loopback() else [])
    for host in hosts:
        with urllib.request.urlopen(f"http://{host}:{a.port}/healthz", timeout=5) as resp:
            assert resp.status == 200, host
    assert a.proc is not None
    assert os.listdir(f"/proc/{a.proc.pid}/task") == [str(a.proc.pid)], "threads besides main"


def test_three_candidates_exactly_one_leader_at_every_sample(spawn: Spawn) -> None:
    procs = [spawn(f"pod-{i}", extra=()) for i in range(3)]
    wait_for(lambda: all(p.http("/healthz")[0] == 200 for p in procs), 15, what="all sidecars up")
    # A namespace no sidecar ran in: the first candidate waits a lease duration (15 s here)
    # before it leads (contract §2, the first term).
    wait_for(lambda: leaders(procs), 30, what="a leader")
    samples = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        by_file = leaders(procs)
        by_http = [p.identity for p in procs if p.http("/leader")[0] == 200]
        assert len(by_file) == 1, by_file
        assert len(by_http) == 1, by_http
        answers = sorted(p.http("/leader")[0] for p in procs)
        assert answers == [200, 503, 503]
        samples += 1
        time.sleep(0.05)
    assert samples > 50


def test_sigterm_publishes_not_leader_then_releases_and_a_follower_leads(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    procs = [spawn(f"pod-{i}") for i in range(3)]
    leader = next(p for p in procs if wait_for(lambda: leaders(procs), 15) and p.leads())
    transitions_before = _lease(api, namespace).spec.lease_transitions
    leader.signal(signal.SIGTERM)
    assert leader.wait(20) == 0
    others = [p for p in procs if p is not leader]
    wait_for(lambda: leaders(others), 5, what="a follower to lead after the release")

    messages = leader.messages()
    assert messages.index("published not-leader") < messages.index("released lease")
    state = leader.state()
    assert state is not None and state["is_leader"] is False and state["valid_until"] is None
    published = _ts(_first(leader, "published not-leader"))
    released = _ts(_first(leader, "released lease"))
    assert published <= released
    lease = _lease(api, namespace)
    assert lease.spec.holder_identity in {p.identity for p in others}
    assert lease.spec.lease_transitions == transitions_before + 1


def test_sigterm_during_start_up_is_a_graceful_exit(
    spawn: Spawn, cluster: ControlPlane, tmp_path: Path
) -> None:
    """The kubelet may stop a container that has only just started: exit 0, not 143.

    The kubeconfig is a FIFO, so start-up blocks reading it, after the imports and
    before the event loop exists; SIGTERM lands there, then the file arrives.
    """
    fifo = tmp_path / "kubeconfig.fifo"
    os.mkfifo(fifo)
    proc = spawn("pod-0", kubeconfig=fifo)
    time.sleep(1.0)
    proc.signal(signal.SIGTERM)
    time.sleep(0.2)
    assert proc.alive, "SIGTERM during start-up killed the process (exit 143)"
    fifo.write_bytes(Path(cluster.kubeconfig).read_bytes())
    assert proc.wait(20) == 0
    assert "stopped" in proc.messages()
    state = proc.state()
    assert state is not None and state["is_leader"] is False


def test_sigkill_follower_takes_over_after_the_lease_duration(spawn: Spawn) -> None:
    procs = [spawn(f"pod-{i}") for i in range(3)]
    wait_for(lambda: leaders(procs), 15, what="a leader")
    leader = next(p for p in procs if p.leads())
    leader.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    leader.wait(10)
    others = [p for p in procs if p is not leader]
    new = wait_for(lambda: leaders(others), 15, interval=0.01, what="takeover after SIGKILL")
    elapsed = time.monotonic() - killed_at
    # lease 3s, renew every 1s: the follower saw the last renew ≤ 1s before the kill.
    assert 1.5 <= elapsed <= 3 + 3, elapsed
    assert not leader.leads(), "the dead leader's file must have lapsed (valid_until)"
    assert len(new) == 1


def test_api_server_down_leader_steps_down_by_the_deadline_then_recovers(
    spawn: Spawn, cluster: ControlPlane
) -> None:
    procs = [spawn(f"pod-{i}") for i in range(2)]
    wait_for(lambda: leaders(procs), 15, what="a leader")
    leader = next(p for p in procs if p.leads())
    cluster.stop_apiserver()
    stopped_at = time.monotonic()
    try:
        wait_for(
            lambda: not leader.leads() and leader.http("/leader")[0] == 503,
            5,
            what="step-down without the API server",
        )
        stepped = time.monotonic() - stopped_at
        assert stepped <= 2 + 1.0, stepped  # renew deadline 2s, tolerance 1s
        time.sleep(2)
        assert leaders(procs) == [], "nobody may lead while the API server is down"
        assert all(p.http("/healthz")[0] == 200 for p in procs), "liveness is not tied to the API"
    finally:
        cluster.start_apiserver()
    wait_for(lambda: leaders(procs), 30, what="a leader after the API server came back")


def test_cleanup_deletes_only_expired_managed_leases(
    cluster: ControlPlane, api: Any, namespace: str
) -> None:
    coord = client.CoordinationV1Api(api)
    now = dt.datetime.now(dt.UTC)
    managed = {"app.kubernetes.io/managed-by": "grelmicro"}

    def make(
        name: str, labels: dict[str, str] | None, renewed: dt.datetime | None, duration: int = 15
    ) -> None:
        coord.create_namespaced_lease(
            namespace,
            client.V1Lease(
                metadata=client.V1ObjectMeta(name=name, labels=labels),
                spec=client.V1LeaseSpec(
                    holder_identity="x", lease_duration_seconds=duration, renew_time=renewed
                ),
            ),
        )

    make("leader-expired", managed, now - dt.timedelta(minutes=10))
    make("leader-live", managed, now, duration=3600)
    make("leader-unmanaged", None, now - dt.timedelta(minutes=10))
    make("leader-no-times", managed, None)
    out = subprocess.run(
        [
            str(BIN),
            "cleanup",
            f"--namespace={namespace}",
            f"--kubeconfig={cluster.kubeconfig}",
            "--margin=5s",  # the expired one is watched for its 15 s + 5 s before the delete
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "deleted 1 expired lease(s)" in out.stdout
    assert "watching 1 expired-looking lease(s) for 20s" in out.stderr
    names = {item.metadata.name for item in coord.list_namespaced_lease(namespace).items}
    assert names == {"leader-live", "leader-unmanaged", "leader-no-times"}


def test_cleanup_exits_1_and_says_so_when_a_delete_is_refused(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    """A sweep that could not delete an expired Lease did not do its job: exit 1, say why."""
    coord = client.CoordinationV1Api(api)
    accounts.service_account(api, namespace, "reader")
    accounts.grant(
        api,
        namespace,
        "reader",
        "read-leases",
        "coordination.k8s.io",
        "leases",
        ["get", "list", "watch"],
    )
    config = accounts.kubeconfig(
        tmp_path / "reader.kubeconfig",
        cluster.server,
        cluster.ca_file,
        {"token": accounts.token(api, namespace, "reader")},
        namespace,
    )
    old = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
    coord.create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(
                name="leader-stale", labels={"app.kubernetes.io/managed-by": "grelmicro"}
            ),
            spec=client.V1LeaseSpec(holder_identity="x", lease_duration_seconds=15, renew_time=old),
        ),
    )
    out = subprocess.run(
        [str(BIN), "cleanup", f"--kubeconfig={config}", "--margin=5s"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    # One JSON warning per failed delete (the log), then one plain line that says what to do.
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("grelmicro-sidecar: could not delete 1 expired lease(s)"), out.stderr
    assert "allow delete on leases.coordination.k8s.io" in last
    assert "Traceback" not in out.stderr
    assert coord.read_namespaced_lease("leader-stale", namespace).metadata.name == "leader-stale"


def test_sweep_spares_a_lease_renewed_between_list_and_delete(
    cluster: ControlPlane, api: Any, namespace: str
) -> None:
    import asyncio

    from sidecar.kit.logs import Logger
    from sidecar.kube.config import load
    from sidecar.kube.leases import LeaseStore
    from sidecar.kube.sweep import Sightings, sight, sweep

    coord = client.CoordinationV1Api(api)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
    coord.create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(
                name="leader-racy", labels={"app.kubernetes.io/managed-by": "grelmicro"}
            ),
            spec=client.V1LeaseSpec(holder_identity="x", lease_duration_seconds=15, renew_time=old),
        ),
    )

    class RenewAfterList(LeaseStore):
        async def list(
            self, label_selector: str = "", field_selector: str = "", timeout: Any = None
        ) -> Any:
            result = await super().list(label_selector, field_selector, timeout)
            lease = coord.read_namespaced_lease("leader-racy", namespace)
            lease.spec.renew_time = dt.datetime.now(dt.UTC)  # a candidate renews right now
            coord.replace_namespaced_lease("leader-racy", namespace, lease)
            return result

    # Seen unchanged long enough (a fake monotonic clock stands for the wait) ...
    clock = [0.0]
    sightings = Sightings(lambda: clock[0])
    plain = LeaseStore(load(str(cluster.kubeconfig)), namespace)
    asyncio.run(sight(plain, sightings))
    plain.close()
    clock[0] = 1000.0
    # ... and renewed between the list that judged it and the delete.
    store = RenewAfterList(load(str(cluster.kubeconfig)), namespace)
    result = asyncio.run(sweep(store, Logger("error"), sightings=sightings))
    store.close()
    assert result.deleted == [] and result.skipped_changed == 1
    assert coord.read_namespaced_lease("leader-racy", namespace).metadata.name == "leader-racy"


def test_forbidden_is_logged_once_with_the_fix_and_recovers_when_granted(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    accounts.service_account(api, namespace)
    kubeconfig = accounts.token_kubeconfig(tmp_path / "sa.kubeconfig", api, cluster, namespace)
    a = spawn("pod-a", kubeconfig=kubeconfig)
    wait_for(lambda: any("forbidden" in m for m in a.messages()), 10, what="a 403 log line")
    time.sleep(3)  # several retries happen meanwhile
    forbidden = [r for r in a.logs() if "forbidden" in str(r.get("msg"))]
    assert len(forbidden) == 1, forbidden
    line = forbidden[0]
    assert line["verb"] == "get" and line["resource"] == "leases.coordination.k8s.io"
    assert (
        "Role" in line["msg"] and "get, list, watch, create, update, patch, delete" in line["msg"]
    )
    assert "Traceback" not in a.raw_log()
    assert a.http("/leader")[0] == 503 and a.alive
    accounts.grant_leases(api, namespace)
    wait_for(a.leads, 20, what="leadership once the Role exists")


def test_bad_kubeconfig_contents_exit_2(tmp_path: Path) -> None:
    for name, text in [
        ("garbage", "{{{ not yaml: ["),
        ("list", "- a\n- b\n"),
        ("nocontext", "apiVersion: v1\nkind: Config\n"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        out = subprocess.run(
            [str(BIN), "run", "--election=main", f"--kubeconfig={path}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, (name, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and str(path) in out.stderr, out.stderr


def test_unwritable_state_dir_exits_1_with_a_clear_error(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    out = subprocess.run(
        [
            str(BIN),
            "run",
            "--election=main",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--state-dir={blocker}/state",
            "--port=0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "state dir" in out.stderr and "emptyDir" in out.stderr and "Traceback" not in out.stderr


def test_garbage_lease_is_taken_over_safely(spawn: Spawn, api: Any, namespace: str) -> None:
    coord = client.CoordinationV1Api(api)
    garbage = coord.create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="leader-main"),
            spec=client.V1LeaseSpec(
                holder_identity="ghost", lease_duration_seconds=2**31 - 1, lease_transitions=7
            ),
        ),
    )
    a = spawn("pod-a")
    started = time.monotonic()
    wait_for(a.leads, 15, what="takeover of the garbage lease")
    assert time.monotonic() - started >= 2.0, "a held lease must be waited out, even a garbage one"
    problems = [r for r in a.logs() if "unusable field" in str(r.get("msg"))]
    assert problems and "leaseDurationSeconds" in problems[0]["problem"]
    lease = _lease(api, namespace)
    assert lease.spec.holder_identity == "pod-a" and lease.spec.lease_transitions == 8
    assert lease.metadata.labels["app.kubernetes.io/managed-by"] == "grelmicro"
    state = a.state()
    assert state is not None and state["fencing_token"] > int(garbage.metadata.resource_version)


def test_hand_edited_holder_makes_the_leader_step_down(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    a = spawn("pod-a")
    wait_for(a.leads, 15)
    coord = client.CoordinationV1Api(api)
    lease = _lease(api, namespace)
    lease.spec.holder_identity = "intruder"
    coord.replace_namespaced_lease("leader-main", namespace, lease)
    edited = time.monotonic()
    wait_for(
        lambda: not a.leads() and a.http("/leader")[0] == 503, 2, what="step-down after the edit"
    )
    assert time.monotonic() - edited < 1.0, "the watch delivers the edit at once"
    assert "stepped down" in a.messages()
    # The intruder never renews: pod-a takes the lease back after a lease duration.
    wait_for(a.leads, 15, what="pod-a to take the abandoned lease back")
    assert time.monotonic() - edited >= 2.5


def test_lease_deleted_while_leading_no_double_leadership(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    procs = [spawn(f"pod-{i}") for i in range(2)]
    wait_for(lambda: leaders(procs), 15)
    client.CoordinationV1Api(api).delete_namespaced_lease("leader-main", namespace)
    deadline = time.monotonic() + 8
    seen_leader = False
    while time.monotonic() < deadline:
        current = leaders(procs)
        assert len(current) <= 1, current
        seen_leader = seen_leader or bool(current)
        time.sleep(0.02)
    assert leaders(procs), "the Lease is recreated and someone leads"
    assert seen_leader


def test_only_the_sweep_duty_holder_sweeps_at_exit_and_then_frees_the_duty(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    """Contract §5 step 3, issue 15 item 2: many pods stopping cost one sweep, not one each."""
    coord = client.CoordinationV1Api(api)
    first = spawn("pod-0")
    wait_for(lambda: _sweeper(coord, namespace) == "pod-0", 15, what="pod-0 to take the duty")
    others = [spawn(f"pod-{i}") for i in (1, 2)]
    wait_for(lambda: leaders([first, *others]), 15)
    for proc in others:  # following pod-0 (pod-0 led at once: a new election)
        wait_for(lambda p=proc: (p.state() or {}).get("holder") == "pod-0", 15, what="following")
    for proc in others:
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.raw_log()[-3000:]
        assert "sweep left to the sweep duty's holder" in proc.messages(), proc.raw_log()[-2000:]
        assert "sweep done" not in proc.messages()
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0
    assert "sweep done" in first.messages(), first.raw_log()[-2000:]
    assert _sweeper(coord, namespace) == ""
    shared = coord.read_namespaced_lease(roster.NAME, namespace)
    assert (shared.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "grelmicro-sidecar"


def _sweeper(coord: Any, namespace: str) -> str | None:
    try:
        obj = coord.read_namespaced_lease(roster.NAME, namespace)
    except client.ApiException:
        return None
    return roster.duty(obj.metadata.annotations or {})[0]
