"""A rollout of the injector refuses no pod creation (issue 37, item 5), in real pods.

While ``kubectl rollout restart`` replaces both injector replicas, annotated
pods are created four times a second through the API server, from before the
restart until the old replicas are gone. Every creation must be admitted, and
every pod admitted must carry the sidecar (``failurePolicy: Fail``: a refusal
is the failure a user would see, ``failed calling webhook … EOF``, and no pod
may slip through without its sidecar). The pods ask for a node that does not
exist, so they stay Pending: admission is all they are for, and a node of two
cores is spared starting a hundred of them.
"""

from __future__ import annotations

import json
import threading
import time

from tests.e2e.conftest import RELEASE_NAMESPACE, Cluster, probe_pod, wait_for

UNSCHEDULABLE = {"grelmicro.test/never": "scheduled"}


def _injector_pods(e2e: Cluster) -> list[str]:
    items = e2e.json(
        "get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/component=injector"
    )["items"]
    return sorted(p["metadata"]["name"] for p in items)


def test_a_rollout_restart_of_the_injector_refuses_no_pod_creation(
    e2e: Cluster, release: str, workload_namespace: str
) -> None:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(e2e.kubeconfig)))
    ns = workload_namespace
    deployment = f"deployment/{release}-grelmicro-sidecar"
    before = _injector_pods(e2e)
    refused: list[str] = []
    created: list[str] = []
    stop = threading.Event()

    def create() -> None:
        index = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                api.create_namespaced_pod(
                    ns, probe_pod(f"rollout-{index:04d}", nodeSelector=UNSCHEDULABLE)
                )
                created.append(f"rollout-{index:04d}")
            except client.ApiException as err:
                message = json.loads(err.body or "{}").get("message", str(err))
                refused.append(f"{time.strftime('%H:%M:%S')} {message}")
            index += 1
            stop.wait(max(0.0, 0.25 - (time.monotonic() - started)))

    creator = threading.Thread(target=create, daemon=True)
    creator.start()
    try:
        time.sleep(3)
        restarted_at = time.monotonic()
        e2e.kubectl("rollout", "restart", "-n", RELEASE_NAMESPACE, deployment)
        e2e.kubectl(
            "rollout", "status", "-n", RELEASE_NAMESPACE, deployment, "--timeout=180s",
            timeout=200,
        )  # fmt: skip
        # Until the old replicas have drained and are gone, and a little after.
        wait_for(lambda: not set(before) & set(_injector_pods(e2e)), 120, "the old replicas to go")
        rollout_seconds = time.monotonic() - restarted_at
        time.sleep(3)
    finally:
        stop.set()
        creator.join(30)
    print(
        f"\ninjector rollout: {rollout_seconds:.1f}s, {len(created)} pods created, "
        f"{len(refused)} refused"
    )
    assert not refused, refused[:5]
    assert len(created) >= 60, len(created)
    made = e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=probe")
    without = [
        p["metadata"]["name"]
        for p in made["items"]
        if not any(c["name"] == "grelmicro-sidecar" for c in p["spec"].get("initContainers") or [])
    ]
    assert len(made["items"]) == len(created) and not without, without
    e2e.kubectl("delete", "pods", "-n", ns, "-l", "app.kubernetes.io/name=probe",
                "--wait=false")  # fmt: skip
