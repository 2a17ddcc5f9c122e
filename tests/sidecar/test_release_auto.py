"""``--release=auto`` against the real API server (contract §5, issue 38).

A sidecar stopped for its own reason (a liveness kill, an in-place update of its
container) while its app runs on must wait for its last ``valid_until`` before
releasing, even if the pod's deletion comes while it stops: the kubelet stops
it for a deletion only once it has seen the deletion, so one that came after
the stop began says nothing about the app. The pod here is never scheduled; a
finalizer keeps it, with its ``deletionTimestamp``, once deleted.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.apiproxy import ApiProxy, label_patch
from tests.sidecar.proc import SidecarProcess, wait_for
from tests.sidecar.test_leader_label import (
    SA,
    label_grant,  # noqa: F401 (the fixture)
    labelled,
    make_pod,
    wait_for_policy,
)

pytestmark = pytest.mark.usefixtures("label_grant")
KEEP = "example.com/keep"
#: valid_until well ahead of the label's and the test's steps.
TIMING = ("--lease-duration=15s", "--renew-deadline=10s", "--retry-period=2s")


def holder(api: Any, namespace: str) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("leader-main", namespace)
    return str(lease.spec.holder_identity or "")


def test_a_deletion_that_comes_after_the_sidecar_began_to_stop_does_not_release_at_once(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    """The leader's sidecar gets SIGTERM with no deletion in sight (its own restart); its
    label's removal is held by the proxy, and meanwhile the pod is deleted. Its app may still
    act on the last valid_until: the Lease stays held until then, not released at once."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="a", labels={"app": "x"}, finalizers=[KEEP]),
            spec=client.V1PodSpec(
                service_account_name=SA,
                containers=[client.V1Container(name="app", image="example.invalid/app:1")],
            ),
        ),
    )
    make_pod(api, namespace, "b")  # wait_for_policy tries its patch on b
    wait_for_policy(cluster, accounts.token(api, namespace, SA, bound_to_pod="a"), namespace)
    proxy = ApiProxy(cluster.server, str(cluster.ca_file)).start()
    kubeconfig = accounts.kubeconfig(
        tmp_path / "a.kubeconfig",
        proxy.url,
        cluster.ca_file,
        {"token": accounts.token(api, namespace, SA, bound_to_pod="a")},
        namespace,
    )
    a = SidecarProcess(
        tmp_path,
        kubeconfig,
        namespace,
        identity="a",
        extra=(*TIMING, "--label-leader", "--release=auto"),
        env={"POD_NAME": "a"},
    )

    def asked() -> list[Any]:
        return [
            s for s in proxy.requests("pass") if s.method == "GET" and s.path.endswith("/pods/a")
        ]

    try:
        a.start()
        wait_for(a.leads, 30, what="a to lead")
        wait_for(lambda: labelled(api, namespace, ["a"]) == ["a"], 10, what="a labelled")
        time.sleep(2.5)  # a renewed since: its valid_until is about 10 s ahead

        proxy.rules.append((label_patch("a", None), "hold"))
        a.signal(signal.SIGTERM)  # no deletion yet: stopped for its own reason
        wait_for(lambda: proxy.requests("hold"), 10, what="the label's removal, held")
        deadline = time.monotonic() + 2  # the question about the pod, if asked by now
        while not asked() and time.monotonic() < deadline:
            time.sleep(0.02)
        core.delete_namespaced_pod("a", namespace)
        deleted = core.read_namespaced_pod("a", namespace).metadata.deletion_timestamp
        assert deleted is not None
        proxy.release_held()
        wait_for(lambda: not labelled(api, namespace, ["a"]), 10, what="the label off a")

        time.sleep(1)
        assert holder(api, namespace) == "a", "released at once: the app may still act"
        assert (
            "the app may still act on the last valid_until; releasing once it has passed "
            "or the app acknowledges (POST /drained)"
        ) in a.messages()
        assert a.wait(30) == 0
        assert holder(api, namespace) == ""  # released once valid_until passed
    finally:
        a.stop()
        proxy.close()
        core.patch_namespaced_pod("a", namespace, {"metadata": {"finalizers": None}})
        print(f"----- a -----\n{a.raw_log()[-3000:]}")
