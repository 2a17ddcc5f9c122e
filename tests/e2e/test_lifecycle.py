"""A release's whole life on a real node: install, upgrade, test, uninstall, and nothing left.

Its own release in its own namespace (one replica), beside the session's release,
so the other tests keep their injector. After ``helm uninstall`` every kind the
API server can list is searched for the release's label: the objects allowed
to remain are the completed ``helm test`` pod, kept on purpose so ``--logs`` can
read it, and the Lease ClusterRole, kept so running sidecars keep leading
(docs: Uninstall); both go with the commands the docs give.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import CHART, Cluster, wait_for

RELEASE = "life"
NAMESPACE = "grelmicro-life"
FULLNAME = f"{RELEASE}-grelmicro-sidecar"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"


def _labelled_anywhere(e2e: Cluster) -> list[str]:
    kinds = e2e.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    found = e2e.json("get", ",".join(kinds), "--all-namespaces", "-l", SELECTOR)["items"]
    return sorted(
        f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in found
    )


def _injector_pods(e2e: Cluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = e2e.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=injector"
    )["items"]
    return items


def test_install_upgrade_test_and_uninstall_leave_nothing_behind(
    e2e: Cluster, release: str
) -> None:
    common = [f"--namespace={NAMESPACE}", "--wait", "--timeout=180s"]
    # The session's release owns the cluster-wide leader-label policy: a second
    # release is told so in one line (contract §9), and installs without it.
    refused = e2e.helm("install", RELEASE, str(CHART), "--create-namespace", *common, check=False)
    assert refused.returncode != 0
    assert "install this release with --set leaderLabel.policy=false" in refused.stderr, (
        refused.stderr
    )
    e2e.helm(
        "install",
        RELEASE,
        str(CHART),
        "--create-namespace",
        "--set=injector.replicas=1",
        "--set=leaderLabel.policy=false",
        *common,
    )
    try:
        first = _injector_pods(e2e)
        secret = e2e.json("get", "secret", "-n", NAMESPACE, f"{FULLNAME}-tls")["data"]

        # Upgrade: new pods roll out with the new value, the TLS stays, the test passes.
        e2e.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--reuse-values",
            "--set=injector.logLevel=debug",
            *common,
        )
        e2e.kubectl(
            "rollout", "status", "-n", NAMESPACE, f"deployment/{FULLNAME}", "--timeout=120s"
        )
        wait_for(
            lambda: {p["metadata"]["name"] for p in _injector_pods(e2e)}.isdisjoint(
                p["metadata"]["name"] for p in first
            ),
            90,
            "the old injector pod to be replaced",
        )
        assert e2e.json("get", "secret", "-n", NAMESPACE, f"{FULLNAME}-tls")["data"] == secret
        tested = e2e.helm("test", RELEASE, f"--namespace={NAMESPACE}", "--logs", check=False)
        assert tested.returncode == 0, tested.stdout + tested.stderr
    finally:
        e2e.helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait", "--timeout=120s")

    wait_for(lambda: not _injector_pods(e2e), 90, "the injector pods to be gone from the node")
    kept = [f"ClusterRole//{FULLNAME}-leases", f"Pod/{NAMESPACE}/{FULLNAME}-test"]
    left = wait_for(
        lambda: (found := _labelled_anywhere(e2e)) == kept and found,
        60,
        "nothing of the release left but the completed test pod and the Lease ClusterRole",
    )
    assert left
    e2e.kubectl("delete", "pod", "-n", NAMESPACE, f"{FULLNAME}-test", "--wait=true")
    e2e.kubectl("delete", "clusterrole", f"{FULLNAME}-leases")
    assert _labelled_anywhere(e2e) == []
    e2e.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s")
