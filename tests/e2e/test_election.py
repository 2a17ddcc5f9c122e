"""One leader among a workload's pods, seen from inside the app containers, and handed over
when the leader pod is deleted; on a real node (or any cluster with the image).

The workload is what a user writes: a Deployment whose pod template carries the
injection annotation, in a namespace enforcing Pod Security ``restricted``,
with ``manifests/rbac.yaml`` applied.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

from sidecar.core.lease import HANDOFF_ANNOTATION
from tests.e2e.conftest import Cluster, process_identity, wait_for
from tests.e2e.observer import OBSERVER_SCRIPT, Views, handovers, overlaps
from tests.sidecar.proc import BIN

APP_IMAGE = "curlimages/curl:8.11.1"  # the examples' app image (a Debian stand-in on our node)
LEASE_SECONDS = 15


def deployment(
    name: str, replicas: int = 3, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "leader-election.grelmicro.io/inject": "true",
                        **(annotations or {}),
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "app",
                            "image": APP_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            # Asks its sidecar who leads, five times a second, and logs it.
                            "command": ["sh", "-c", OBSERVER_SCRIPT],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def pods(e2e: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = e2e.json("get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/name={name}")[
        "items"
    ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def view_from_app(e2e: Cluster, namespace: str, pod: str) -> tuple[dict[str, Any], str]:
    """The state file and the /leader status code, read inside the app container.

    The file is read before and after the probe: if it changed in between
    (leadership moved while we looked), the two views are of different moments
    and are read again, so the caller compares views of one moment.
    """
    script = (
        'f="$LEADER_ELECTION_STATE_FILE"; cat "$f"; echo "@@"; '
        'curl -s -o /dev/null -w "%{http_code}" "$LEADER_ELECTION_URL"; echo "@@"; cat "$f"'
    )
    for _ in range(5):
        out = e2e.kubectl("exec", "-n", namespace, pod, "-c", "app", "--", "sh", "-c", script)
        before, code, after = out.stdout.split("@@")
        if json.loads(before) == json.loads(after):
            break
    return json.loads(before), code.strip()


def lease(e2e: Cluster, namespace: str) -> dict[str, Any]:
    items = e2e.json(
        "get", "leases", "-n", namespace, "-l", "app.kubernetes.io/managed-by=grelmicro"
    )["items"]
    assert len(items) == 1, [i["metadata"]["name"] for i in items]
    return items[0]


def _app_running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any(c["name"] == "app" and "running" in (c.get("state") or {}) for c in statuses)


def leaders(e2e: Cluster, namespace: str, name: str) -> list[str]:
    """The pods whose app sees itself leading (pods still starting or stopping are skipped)."""
    out = []
    for pod in pods(e2e, namespace, name):
        if not _app_running(pod):
            continue
        try:
            state, code = view_from_app(e2e, namespace, pod["metadata"]["name"])
        except AssertionError:  # the pod went away between the list and the exec
            continue
        assert (code == "200") == bool(state["is_leader"]), (pod["metadata"]["name"], state, code)
        if code == "200":
            out.append(pod["metadata"]["name"])
    return out


def deploy(
    e2e: Cluster,
    namespace: str,
    name: str,
    script: str | None = None,
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> None:
    """``deployment(name, **kwargs)`` applied and rolled out; its app runs ``script`` (default:
    the observer's) with ``env``."""
    spec = deployment(name, **kwargs)
    app = spec["spec"]["template"]["spec"]["containers"][0]
    if script is not None:
        app["command"] = ["sh", "-c", script]
    app["env"] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    e2e.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(spec))
    e2e.kubectl("rollout", "status", "-n", namespace, f"deployment/{name}", "--timeout=180s")


def test_annotated_deployment_elects_exactly_one_leader_seen_from_the_apps(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    started = time.monotonic()
    deploy(e2e, ns, "worker")
    for pod in pods(e2e, ns, "worker"):
        names = [c["name"] for c in pod["spec"].get("initContainers", [])]
        assert names == ["grelmicro-sidecar"], names
        who = process_identity(e2e, ns, pod["metadata"]["name"], "grelmicro-sidecar")
        assert who == ["65532", "65532", "Read-only file system"], who
    leader = wait_for(lambda: leaders(e2e, ns, "worker"), 60, "a leader")
    elected = time.monotonic() - started
    assert len(leader) == 1, leader
    assert lease(e2e, ns)["spec"]["holderIdentity"] == leader[0]
    print(
        f"\n[e2e] 3 pods created -> rolled out and one leader seen from the apps in {elected:.1f}s",
        file=sys.stderr,
    )

    table = e2e.kubectl(
        "get", "leases", "-n", ns, "-l", "app.kubernetes.io/managed-by=grelmicro"
    ).stdout
    assert leader[0] in table
    status = subprocess.run(
        [
            str(BIN),
            "status",
            f"--kubeconfig={e2e.kubeconfig}",
            "-n",
            ns,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert leader[0] in status.stdout, status.stdout


def _rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_deleting_the_leader_pod_releases_and_a_successor_leads(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    deploy(e2e, ns, "worker")
    old = wait_for(lambda: leaders(e2e, ns, "worker"), 60, "a leader")[0]
    before = lease(e2e, ns)["spec"]
    with Views(e2e, ns, "worker").recording() as views:
        wait_for(lambda: old in views.logs, 30, "the leader's app log")
        deleted_at = time.time()
        e2e.kubectl("delete", "pod", "-n", ns, old, "--wait=false")

        def successor() -> dict[str, Any] | None:
            """The successor's own claim (a hand-off names it before it claims, contract §2)."""
            obj = lease(e2e, ns)
            spec, notes = obj["spec"], obj["metadata"].get("annotations") or {}
            holder = spec.get("holderIdentity")
            handed = HANDOFF_ANNOTATION in notes
            return spec if holder and holder != old and not handed else None

        after = wait_for(successor, 60, "a successor in the Lease", interval=0.05)
        new = after["holderIdentity"]
        wait_for(
            lambda: any(a.leads for a in views.since(deleted_at).get(new, [])),
            30,
            "the successor's app to be told it leads",
        )
    acquired = _rfc3339(after["acquireTime"])
    # Released, not expired: the successor took over well before the lease would have run out.
    assert acquired - deleted_at < LEASE_SECONDS, (before, after)
    assert after["leaseTransitions"] > before.get("leaseTransitions", 0)
    seen = views.answers()
    assert not overlaps(seen), overlaps(seen)
    moved = [h for h in handovers(seen) if h[0] == old and h[1] == new]
    assert len(moved) == 1, handovers(seen)
    new_state, code = view_from_app(e2e, ns, new)
    assert code == "200" and new_state["is_leader"], new_state
    assert new_state["fencing_token"] > 0
    print(
        f"\n[e2e] delete leader pod -> successor acquired {acquired - deleted_at:.2f}s later; "
        f"no app told it leads for {moved[0][2]:.2f}s",
        file=sys.stderr,
    )
    wait_for(
        lambda: len(leaders(e2e, ns, "worker")) == 1, 30, "exactly one leader after the handover"
    )

    # kubectl describe lease tells the story, from Events the sidecars recorded in their pods.
    def described() -> str | None:
        text = e2e.kubectl("describe", "lease", "-n", ns, "leader-worker").stdout
        return text if f"{new} became leader" in text else None

    story = wait_for(described, 30, "the successor's Event on the Lease")
    assert f"{old} stopped leading: shutting down" in story, story


def test_rollout_restart_completes_with_one_leader_at_a_time(
    e2e: Cluster, workload_namespace: str
) -> None:
    """Default strategy, readiness not gated: every pod is Ready, so the rollout runs through."""
    ns = workload_namespace
    deploy(e2e, ns, "worker")
    first = wait_for(lambda: leaders(e2e, ns, "worker"), 60, "a leader")[0]
    old_pods = {p["metadata"]["name"] for p in pods(e2e, ns, "worker")}
    token_before = lease(e2e, ns)["spec"].get("leaseTransitions", 0)
    with Views(e2e, ns, "worker").recording() as views:
        wait_for(lambda: first in views.logs, 30, "the leader's app log")
        started = time.monotonic()
        e2e.kubectl("rollout", "restart", "-n", ns, "deployment/worker")
        e2e.kubectl("rollout", "status", "-n", ns, "deployment/worker", "--timeout=300s")
        took = time.monotonic() - started
        leader = wait_for(
            lambda: [p for p in leaders(e2e, ns, "worker") if p not in old_pods],
            60,
            "a leader among the new pods",
        )
        time.sleep(1)
    seen = views.answers()
    assert not overlaps(seen), overlaps(seen)
    assert len(leader) == 1, leader
    moved = handovers(seen)
    assert moved, "leadership never moved although every pod was replaced"
    # Each move was a release, not an expiry: no app went without a leader for a lease.
    assert all(gap < LEASE_SECONDS for _, _, gap in moved), moved
    assert lease(e2e, ns)["spec"]["leaseTransitions"] > token_before
    gaps = ", ".join(f"{gap:.2f}s" for _, _, gap in moved)
    print(
        f"\n[e2e] rollout restart of 3 pods done in {took:.1f}s; leader moved "
        f"{len(moved)} time(s), no app told it leads for: {gaps}",
        file=sys.stderr,
    )
