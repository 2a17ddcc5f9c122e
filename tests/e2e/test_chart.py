"""The chart, installed as a user installs it, running on a real node with the image built here.

Replaces the stand-in kubelet the control-plane-only tests used for ``helm
test``: the injector's two replicas run as pods behind their Service with the
chart's own TLS, and ``helm test --logs`` runs the chart's test pod for real.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import RELEASE_NAMESPACE, Cluster, process_identity


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def test_injector_replicas_ready_behind_the_service_and_helm_test_passes(
    e2e: Cluster, release: str
) -> None:
    pods = e2e.json(
        "get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/component=injector"
    )["items"]
    assert len(pods) == 2 and all(_ready(p) for p in pods), [p["status"] for p in pods]
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        # The image's own user and a read-only root, as the running process sees them.
        who = process_identity(e2e, RELEASE_NAMESPACE, pod["metadata"]["name"], container["name"])
        assert who == ["65532", "65532", "Read-only file system"], who
        status = pod["status"]["containerStatuses"][0]
        if status["restartCount"]:
            name = pod["metadata"]["name"]
            previous = e2e.kubectl(
                "logs", "-n", RELEASE_NAMESPACE, name, "--previous", "--tail=40", check=False
            )
            raise AssertionError(
                f"{name} restarted {status['restartCount']} times; last state "
                f"{status.get('lastState')}; its log:\n{previous.stdout}{previous.stderr}"
            )
        # The API server is dialled at the address the kubelet gives every pod, not
        # at kubernetes.default.svc: an injector must not need cluster DNS to start.
        log = e2e.kubectl("logs", "-n", RELEASE_NAMESPACE, pod["metadata"]["name"]).stdout
        logins = [
            json.loads(line)
            for line in log.splitlines()
            if "logged in with the service account" in line
        ]
        service = e2e.json("get", "service", "kubernetes", "-n", "default")["spec"]
        assert logins and {entry["api_server"] for entry in logins} == {
            f"https://{service['clusterIP']}:{service['ports'][0]['port']}"
        }, log
    endpoints = e2e.json(
        "get",
        "endpointslices",
        "-n",
        RELEASE_NAMESPACE,
        "-l",
        f"kubernetes.io/service-name={release}-grelmicro-sidecar",
    )
    addresses = [
        a for s in endpoints["items"] for e in s.get("endpoints") or [] for a in e["addresses"]
    ]
    assert sorted(addresses) == sorted(p["status"]["podIP"] for p in pods)

    # --logs reads the test pod's output after it finished (helm v3.22 failed here before).
    test = e2e.helm(
        "test", release, f"--namespace={RELEASE_NAMESPACE}", "--logs", "--timeout=120s", check=False
    )
    assert test.returncode == 0, test.stdout + test.stderr
    assert "the injector works" in test.stdout
    assert "Phase:          Succeeded" in test.stdout
