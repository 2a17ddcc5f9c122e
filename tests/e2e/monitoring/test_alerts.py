"""Each shipped alert fires on a real Prometheus when its condition is induced in real pods, then resolves.

The condition is made as it happens in a cluster: the Lease RBAC deleted, a
leader whose clock runs slow cut off from the API server, a node clock that is
off, a sidecar killed through the runtime, no injector behind the webhook, the
injector's RBAC gone, apps that fail their health checks, an app that stops
acknowledging its drains. Each test first
checks that its alert is not active, then waits for it to fire through
``/api/v1/alerts``, puts things right and waits for it to resolve; the times
seen are printed (``[alerts] ...``) for docs and the issue.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.injector.patch import CONTAINER_NAME
from tests.cluster.host import ensure_packages
from tests.cluster.network import KUBERNETES_SERVICE_IP
from tests.cluster.node import Node
from tests.cluster.prometheus import Prometheus
from tests.e2e.conftest import RELEASE_NAMESPACE, ROOT, Cluster
from tests.e2e.monitoring.conftest import (
    FAST_ARGS,
    IDLE_APP,
    Seen,
    deploy,
    idle_deployment,
    injector_settled,
    leaders,
    poll,
    steer,
    steered_deployment,
    wait_alert,
    wait_resolved,
)
from tests.skew import LIBFAKETIME

pytestmark = pytest.mark.timeout(300)

FAKETIME_DIR = str(Path(LIBFAKETIME).parent)


def _quiet(prom: Prometheus, name: str, labels: dict[str, str], within: float = 60) -> None:
    """``name`` is not active once the election runs, before its condition is induced.

    Polled, not read once: a first election in a brand-new namespace is
    leaderless for one lease duration by design (contract §2, the first term
    is not proven), so GrelmicroElectionWithoutLeader may be pending from the
    election's birth until the next rule evaluation after its first leader; it
    must clear, and never fire (its ``for`` is far longer than that wait)."""
    deadline = time.monotonic() + within
    while True:
        active = [
            a for a in prom.alerts(name) if all(a["labels"].get(k) == v for k, v in labels.items())
        ]
        firing = [a for a in active if a.get("state") == "firing"]
        assert not firing, f"{name} fired before its condition was induced: {firing}"
        if not active:
            return
        assert time.monotonic() < deadline, f"{name} is active before its condition: {active}"
        time.sleep(1)


def manual_pod(
    name: str, election: str, env: dict[str, str], host_dirs: dict[str, str]
) -> dict[str, Any]:
    """manifests/examples/manual-sidecar.yaml as one Pod, with ``env`` and read-only
    ``host_dirs`` (node path -> container path) given to the sidecar."""
    example = yaml.safe_load((ROOT / "manifests" / "examples" / "manual-sidecar.yaml").read_text())
    spec = example["spec"]["template"]["spec"]
    sidecar = spec["initContainers"][0]
    sidecar["args"] = [
        "run",
        f"--election={election}",
        *FAST_ARGS,
        "--state-dir=/var/run/leader-election",
        "--port=4040",
    ]
    sidecar["env"] += [{"name": k, "value": v} for k, v in env.items()]
    app = spec["containers"][0]
    app["command"] = IDLE_APP
    app["volumeMounts"] = [m for m in app["volumeMounts"] if m["name"] != "scripts"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "scripts"]
    for i, (host, inside) in enumerate(host_dirs.items()):
        spec["volumes"].append(
            {"name": f"host-{i}", "hostPath": {"path": host, "type": "Directory"}}
        )
        sidecar["volumeMounts"].append({"name": f"host-{i}", "mountPath": inside, "readOnly": True})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": election}},
        "spec": spec,
    }


def _create(e2e: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    e2e.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))


def test_an_election_without_its_lease_rbac_has_no_leader_and_its_requests_fail(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str
) -> None:
    ns = monitored_namespace
    election = {"namespace": ns, "name": "leader-web"}
    deploy(e2e, ns, idle_deployment("web", 2, {}))
    poll(lambda: len(leaders(prometheus, ns, "leader-web")) == 1, 60, "one leader, scraped")
    _quiet(prometheus, "GrelmicroElectionWithoutLeader", election)
    _quiet(prometheus, "GrelmicroSidecarLeaseRequestsFailing", {"namespace": ns})

    seen = Seen()
    e2e.kubectl("delete", "rolebinding", "-n", ns, "grelmicro-sidecar-leases-default")
    alert = wait_alert(prometheus, seen, "GrelmicroElectionWithoutLeader", election)
    assert float(alert["value"]) > 4, alert  # no write for longer than the 4 s lease
    assert leaders(prometheus, ns, "leader-web") == []
    wait_alert(
        prometheus, seen, "GrelmicroSidecarLeaseRequestsFailing", {"namespace": ns, "code": "403"}
    )

    seen.mark("RBAC restored")
    e2e.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    wait_resolved(prometheus, seen, "GrelmicroElectionWithoutLeader", election)
    # The rule reads any candidate's view of the Lease; the new leader's own gauge may come
    # in a scrape later (CI: resolved, and no leader in that same instant).
    poll(lambda: len(leaders(prometheus, ns, "leader-web")) == 1, 30, "one leader, scraped")
    wait_resolved(prometheus, seen, "GrelmicroSidecarLeaseRequestsFailing", {"namespace": ns})
    seen.report("Lease RoleBinding deleted")


def _partition_from_the_api_server(e2e: Cluster, node: Node, namespace: str, pod: str) -> None:
    """Drop what the pod exchanges with the API server (its Service address) inside the
    pod's network namespace, both ways: its requests go unanswered and its watch goes
    quiet, as in a network partition. Scrapes still reach it (they come from the bridge
    address). Gone with the pod."""
    sidecar = _sidecar(e2e, namespace, pod)
    task = sidecar["containerID"].removeprefix("containerd://")
    pids = {
        row.split()[0]: row.split()[1] for row in node.ctr("tasks", "ls").stdout.splitlines()[1:]
    }
    rules = (
        "table inet partition {\n"
        "  chain out {\n"
        "    type filter hook output priority 0; policy accept;\n"
        f"    ip daddr {KUBERNETES_SERVICE_IP} tcp dport 443 drop\n"
        "  }\n"
        "  chain in {\n"
        "    type filter hook input priority 0; policy accept;\n"
        f"    ip saddr {KUBERNETES_SERVICE_IP} tcp sport 443 drop\n"
        "  }\n"
        "}\n"
    )
    subprocess.run(
        ["nsenter", f"--target={pids[task]}", "--net", "nft", "-f", "-"],
        input=rules,
        text=True,
        check=True,
        capture_output=True,
    )


def test_a_partitioned_leader_whose_clock_runs_slow_and_its_successor_both_lead(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str, local_node: Node
) -> None:
    """The election's stated assumption (docs/reliability.md): clocks tick at the same rate.

    A leader whose clock runs at a twentieth of the rate is cut off from the API
    server: it cannot renew, nor see anyone else's claim, and steps down only
    when its 2 s renew deadline has passed on its own clock, 40 s of real time.
    Its peer, on a true clock, takes the Lease 4 s after the last change it
    saw: two pods say they lead until the slow one's deadline.
    """
    ensure_packages({"libfaketime": LIBFAKETIME})
    ns = monitored_namespace
    election = {"namespace": ns, "name": "leader-split"}
    # Released (empty holder): the first candidate takes it at once (contract §2).
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "leader-split",
            "labels": {"app.kubernetes.io/managed-by": "grelmicro"},
        },
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 4},
    }
    _create(e2e, ns, lease)
    slow_clock = {
        "LD_PRELOAD": f"/faketime/{Path(LIBFAKETIME).name}",
        "FAKETIME": "+0 x0.05",  # wall and monotonic clocks at 1/20 of the rate
    }
    _create(e2e, ns, manual_pod("slow", "split", slow_clock, {FAKETIME_DIR: "/faketime"}))
    poll(lambda: leaders(prometheus, ns, "leader-split") == ["slow"], 90, "the slow pod to lead")
    _quiet(prometheus, "GrelmicroElectionMultipleLeaders", election)

    seen = Seen()
    _partition_from_the_api_server(e2e, local_node, ns, "slow")
    seen.mark("slow leader partitioned")
    _create(e2e, ns, manual_pod("steady", "split", {}, {}))
    wait_alert(prometheus, seen, "GrelmicroElectionMultipleLeaders", election)
    assert leaders(prometheus, ns, "leader-split") == ["slow", "steady"]
    lease_now = e2e.json("get", "lease", "-n", ns, "leader-split")
    assert lease_now["spec"]["holderIdentity"] == "steady"
    wait_resolved(prometheus, seen, "GrelmicroElectionMultipleLeaders", election)
    assert leaders(prometheus, ns, "leader-split") == ["steady"]
    seen.report("a partitioned leader at 1/20 of the clock rate")


def test_a_node_clock_off_by_more_than_the_election_tolerates(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str
) -> None:
    """30 s ahead, then set right: the tolerance is lease duration - renew deadline (2 s here)."""
    ensure_packages({"libfaketime": LIBFAKETIME})
    ns = monitored_namespace
    spec_dir = Path(tempfile.mkdtemp(prefix="grelmicro-faketime-"))
    spec_dir.chmod(0o755)  # read by the sidecar's user

    def set_clock(offset: str) -> None:
        staged = spec_dir / "spec.new"
        staged.write_text(f"{offset}\n")
        staged.chmod(0o644)
        os.replace(staged, spec_dir / "spec")  # libfaketime never reads half a file

    try:
        set_clock("+30")
        skewed = {
            "LD_PRELOAD": f"/faketime/{Path(LIBFAKETIME).name}",
            "FAKETIME_TIMESTAMP_FILE": "/faketime-spec/spec",
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        dirs = {FAKETIME_DIR: "/faketime", str(spec_dir): "/faketime-spec"}
        seen = Seen()
        _create(e2e, ns, manual_pod("skewed", "skew", skewed, dirs))
        target = {"namespace": ns, "pod": "skewed"}
        alert = wait_alert(prometheus, seen, "GrelmicroSidecarClockSkew", target)
        assert 28 <= float(alert["value"]) <= 32, alert
        tolerance = prometheus.query(
            f'grelmicro_sidecar_lease_duration_seconds{{namespace="{ns}"}}'
            f' - grelmicro_sidecar_renew_deadline_seconds{{namespace="{ns}"}}'
        )
        assert [float(r["value"][1]) for r in tolerance] == [2.0]

        set_clock("+0")
        seen.mark("clock set right")
        wait_resolved(prometheus, seen, "GrelmicroSidecarClockSkew", target)
        skew = prometheus.query(f'grelmicro_sidecar_clock_skew_seconds{{namespace="{ns}"}}')
        assert abs(float(skew[0]["value"][1])) < 2, skew
        seen.report("a node clock 30 s ahead")
    finally:
        shutil.rmtree(spec_dir, ignore_errors=True)


def _sidecar(e2e: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    status = e2e.json("get", "pod", "-n", namespace, pod)["status"]
    found: dict[str, Any] = next(
        s for s in status.get("initContainerStatuses") or [] if s["name"] == CONTAINER_NAME
    )
    return found


def _started_at(prom: Prometheus, namespace: str, pod: str) -> float | None:
    rows = prom.query(f'process_start_time_seconds{{namespace="{namespace}",pod="{pod}"}}')
    return float(rows[0]["value"][1]) if rows else None


def _kill_and_see_restarted(
    e2e: Cluster, prom: Prometheus, node: Node, namespace: str, pod: str, started: float
) -> float:
    """SIGKILL the sidecar through containerd; the kubelet restarts it (after a 10 s
    back-off the second time); returns the new process's start time once scraped."""
    before = _sidecar(e2e, namespace, pod)
    node.kill_container(before["containerID"])

    def restarted() -> float | None:
        now = _started_at(prom, namespace, pod)
        return now if now is not None and now != started else None

    new: float = poll(restarted, 60, "the restarted sidecar scraped")
    poll(
        lambda: _sidecar(e2e, namespace, pod)["restartCount"] == before["restartCount"] + 1,
        30,
        "the pod's status to count the restart",
    )
    return new


def test_a_sidecar_killed_twice_is_seen_restarting(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str, local_node: Node
) -> None:
    ns = monitored_namespace
    deploy(e2e, ns, idle_deployment("crashy", 1, {}))
    pod = e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=crashy")["items"][0]
    name = pod["metadata"]["name"]
    target = {"namespace": ns, "pod": name}
    started = poll(lambda: _started_at(prometheus, ns, name), 60, "the sidecar scraped")
    _quiet(prometheus, "GrelmicroSidecarRestarting", target)

    seen = Seen()
    for kill in (1, 2):
        started = _kill_and_see_restarted(e2e, prometheus, local_node, ns, name, started)
        seen.mark(f"restart {kill} scraped")
    alert = wait_alert(prometheus, seen, "GrelmicroSidecarRestarting", target)
    assert float(alert["value"]) >= 2, alert
    assert alert["labels"]["container"] == CONTAINER_NAME
    wait_resolved(prometheus, seen, "GrelmicroSidecarRestarting", target)
    seen.report("a sidecar SIGKILLed twice through containerd")


def test_pods_refused_while_no_injector_answers_the_webhook(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str, release: str
) -> None:
    ns = monitored_namespace
    webhook = {"name": "inject.leader-election.grelmicro.io"}
    injector = f"deployment/{release}-grelmicro-sidecar"
    _quiet(prometheus, "GrelmicroInjectorWebhookFailing", webhook)
    seen = Seen()
    e2e.kubectl("scale", "-n", RELEASE_NAMESPACE, injector, "--replicas=0")
    try:
        poll(
            lambda: (
                not e2e.json(
                    "get",
                    "pods",
                    "-n",
                    RELEASE_NAMESPACE,
                    "-l",
                    "app.kubernetes.io/component=injector",
                )["items"]
            ),
            60,
            "no injector pod",
        )
        seen.mark("injector scaled to 0")
        pod = idle_deployment("refused", 1, {})["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}

        def refused() -> dict[str, Any] | None:
            pod["metadata"]["name"] = f"refused-{len(seen.marks)}"
            created = e2e.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod), check=False)
            assert created.returncode != 0, "a pod was created without its sidecar"
            assert "failed calling webhook" in created.stderr, created.stderr
            seen.mark(f"refused {len(seen.marks)}")
            return next(
                (
                    a
                    for a in prometheus.alerts("GrelmicroInjectorWebhookFailing")
                    if a["state"] == "firing"
                ),
                None,
            )

        alert = poll(refused, 60, "GrelmicroInjectorWebhookFailing to fire")
        seen.mark("GrelmicroInjectorWebhookFailing firing")
        assert alert["labels"]["operation"] == "CREATE"
    finally:
        e2e.kubectl("scale", "-n", RELEASE_NAMESPACE, injector, "--replicas=2")
        e2e.kubectl("rollout", "status", "-n", RELEASE_NAMESPACE, injector, "--timeout=120s")
        injector_settled(e2e)
    seen.mark("injector back")
    wait_resolved(prometheus, seen, "GrelmicroInjectorWebhookFailing", webhook)
    seen.report("no injector behind the webhook")


def test_the_injectors_sweeps_fail_without_its_rbac(
    e2e: Cluster, prometheus: Prometheus, release: str
) -> None:
    binding = f"{release}-grelmicro-sidecar-injector"
    where = {"namespace": RELEASE_NAMESPACE}
    saved = e2e.json("get", "clusterrolebinding", binding)
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        saved["metadata"].pop(key, None)
    poll(
        lambda: prometheus.query(
            f'increase(grelmicro_injector_sweeps_total{{result="ok",namespace="{RELEASE_NAMESPACE}"}}[10s]) > 0'
        ),
        60,
        "the injectors sweeping, scraped",
    )
    _quiet(prometheus, "GrelmicroInjectorSweepFailing", where)
    seen = Seen()
    e2e.kubectl("delete", "clusterrolebinding", binding)
    try:
        wait_alert(prometheus, seen, "GrelmicroInjectorSweepFailing", where)
    finally:
        e2e.kubectl("create", "-f", "-", input=json.dumps(saved))
    seen.mark("ClusterRoleBinding restored")
    wait_resolved(prometheus, seen, "GrelmicroInjectorSweepFailing", where)
    seen.report("the injector's ClusterRoleBinding deleted")


P = "leader-election.grelmicro.io/"


def _scraped(prom: Prometheus, expr: str) -> dict[str, float]:
    """``expr``'s value by pod, as Prometheus last scraped it."""
    return {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(expr)}


def test_a_leader_whose_app_fails_hands_over_then_no_candidate_is_healthy(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str
) -> None:
    """The leader's app fails its checks: it hands over, and the alert names it. Then the
    new leader's app fails too: no candidate is healthy (the leader keeps, by default).
    Both apps pass again: the second resolves at once, the first once the window passes."""
    ns = monitored_namespace
    election = {"namespace": ns, "name": "leader-web"}
    health = {
        P + "health-file": "true",
        P + "health-file-age": "1s",
        P + "health-period": "500ms",
        P + "health-failures": "2",
        P + "health-hold": "2s",
    }
    deploy(e2e, ns, steered_deployment("web", 2, health))
    healthy = f'grelmicro_sidecar_app_healthy{{namespace="{ns}",name="leader-web"}}'
    poll(lambda: len(leaders(prometheus, ns, "leader-web")) == 1, 60, "one leader, scraped")
    poll(lambda: list(_scraped(prometheus, healthy).values()) == [1.0, 1.0], 30, "healthy apps")
    _quiet(prometheus, "GrelmicroLeaderAppUnhealthy", election)
    _quiet(prometheus, "GrelmicroElectionNoHealthyCandidate", election)
    time.sleep(2)  # the leader has led longer than the hold
    [first] = leaders(prometheus, ns, "leader-web")

    seen = Seen()
    steer(e2e, ns, first, "touch", "sick")
    wait_alert(prometheus, seen, "GrelmicroLeaderAppUnhealthy", {**election, "pod": first})
    [second] = poll(
        lambda: [p for p in leaders(prometheus, ns, "leader-web") if p != first],
        30,
        "the healthy pod leads",
    )
    seen.mark("its app failing too")
    steer(e2e, ns, second, "touch", "sick")
    wait_alert(prometheus, seen, "GrelmicroElectionNoHealthyCandidate", election)
    assert leaders(prometheus, ns, "leader-web") == [second]  # --when-none-healthy=keep
    seen.mark("both apps pass")
    for pod in (first, second):
        steer(e2e, ns, pod, "rm", "-f", "sick")
    wait_resolved(prometheus, seen, "GrelmicroElectionNoHealthyCandidate", election)
    wait_resolved(prometheus, seen, "GrelmicroLeaderAppUnhealthy", {**election, "pod": first})
    # The second never handed over (nobody healthy to take it): never alerted.
    assert not prometheus.alerts("GrelmicroLeaderAppUnhealthy")
    seen.report("apps unhealthy")


def test_an_app_that_stops_acknowledging_its_drains(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str
) -> None:
    """Two pods whose apps acknowledge drains: a transfer asked by the leader's app is
    acknowledged (quiet). The next leader's app stops acknowledging and asks for a transfer:
    its drain runs to valid_until, and the alert names it until the window passes."""
    ns = monitored_namespace
    election = {"namespace": ns, "name": "leader-jobs"}
    deploy(e2e, ns, steered_deployment("jobs", 2, {}))
    poll(lambda: len(leaders(prometheus, ns, "leader-jobs")) == 1, 60, "one leader, scraped")
    [first] = leaders(prometheus, ns, "leader-jobs")
    transfer = ("curl", "-s", "-w", " %{http_code}", "-X", "POST", "http://127.0.0.1:4040/transfer")
    # Refused (409) until the follower is listed to take over: asked again until taken.
    poll(lambda: steer(e2e, ns, first, *transfer).endswith(" 202"), 30, "a transfer taken")
    [second] = poll(
        lambda: [p for p in leaders(prometheus, ns, "leader-jobs") if p != first],
        30,
        "the other pod leads",
    )
    drains = f'grelmicro_sidecar_drains_total{{namespace="{ns}",name="leader-jobs"'
    poll(
        lambda: _scraped(prometheus, drains + ',ended="acknowledged"} > 0') == {first: 1.0},
        30,
        "the first drain acknowledged, scraped",
    )
    _quiet(prometheus, "GrelmicroDrainNotAcknowledged", election)

    seen = Seen()
    steer(e2e, ns, second, "touch", "noack")
    poll(lambda: steer(e2e, ns, second, *transfer).endswith(" 202"), 30, "a transfer taken")
    wait_alert(prometheus, seen, "GrelmicroDrainNotAcknowledged", {**election, "pod": second})
    assert _scraped(prometheus, drains + ',ended="deadline"}') == {first: 0.0, second: 1.0}
    assert leaders(prometheus, ns, "leader-jobs") == [first]
    wait_resolved(prometheus, seen, "GrelmicroDrainNotAcknowledged", election)
    seen.report("a drain not acknowledged")
