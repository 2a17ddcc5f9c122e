"""The node runs pods the way a user's cluster does: what the sidecar relies on, observed.

These check the platform, not the product: a native sidecar starts before the
app and gets SIGTERM after it, an httpGet readiness probe gates the pod, an
emptyDir is shared, pods reach the API server through the ``kubernetes``
Service and resolve names through CoreDNS, and nothing leaves the machine.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from tests.cluster.node import Node
from tests.cluster.nodeimages import BUSYBOX_IMAGE


def _container(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        **extra,
    }


def _apply_pod(node: Node, pod: dict[str, Any]) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        **pod,
    }
    node.plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    return name


def test_native_sidecar_first_up_last_down_with_probe_and_shared_emptydir(node: Node) -> None:
    out = node.workdir / f"order-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    sidecar = _container(
        "sidecar",
        "trap 'read up _ < /proc/uptime; echo sidecar $up >> /out/term; exit 0' TERM; "
        "echo ready > /shared/probe; httpd -p 8080 -h /shared; while true; do sleep 1; done",
        restartPolicy="Always",
        volumeMounts=[
            {"name": "shared", "mountPath": "/shared"},
            {"name": "out", "mountPath": "/out"},
        ],
    )
    app = _container(
        "app",
        # The file exists only if the sidecar ran first; TERM handling takes 1 s on purpose.
        "cat /shared/probe > /out/seen; "
        "trap 'sleep 1; read up _ < /proc/uptime; echo app $up >> /out/term; exit 0' TERM; "
        "while true; do sleep 1; done",
        readinessProbe={"httpGet": {"path": "/probe", "port": 8080}, "periodSeconds": 1},
        volumeMounts=[
            {"name": "shared", "mountPath": "/shared"},
            {"name": "out", "mountPath": "/out"},
        ],
    )
    name = _apply_pod(
        node,
        {
            "spec": {
                "terminationGracePeriodSeconds": 20,
                "initContainers": [sidecar],
                "containers": [app],
                "volumes": [
                    {"name": "shared", "emptyDir": {}},
                    {"name": "out", "hostPath": {"path": str(out), "type": "Directory"}},
                ],
            }
        },
    )
    node.plane.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    assert (out / "seen").read_text().strip() == "ready", (
        "the app started before its native sidecar"
    )

    node.plane.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
    lines = [line.split() for line in (out / "term").read_text().splitlines()]
    order = [who for who, _ in lines]
    assert order == ["app", "sidecar"], f"SIGTERM order on delete: {lines}"
    assert float(lines[1][1]) >= float(lines[0][1])


def test_pods_reach_api_and_dns_and_nothing_outside(node: Node) -> None:
    script = (
        "nslookup kubernetes.default.svc.cluster.local; "
        "echo | nc -w 2 10.0.0.1 443 && echo API-REACHED; "
        "ip route; "
        "echo | nc -w 2 192.0.2.1 80 || echo EGRESS-BLOCKED; "
        "sleep 3600"
    )
    name = _apply_pod(node, {"spec": {"containers": [_container("probe", script)]}})
    node.plane.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    deadline = time.monotonic() + 30
    logs = ""
    while time.monotonic() < deadline and "EGRESS-BLOCKED" not in logs:
        time.sleep(0.5)
        logs = node.plane.kubectl("logs", name, check=False).stdout
    assert "Address: 10.0.0.1" in logs, logs
    assert "API-REACHED" in logs, logs
    assert "default via" not in logs, f"a pod must have no default route:\n{logs}"
    assert "EGRESS-BLOCKED" in logs, logs
    node.plane.kubectl("delete", "pod", name, "--grace-period=0", "--wait=false")


def test_node_is_cached_and_reports_what_it_built(node: Node) -> None:
    assert node.timings["ready"] > 0
    assert Path(node.kubeconfig).exists()
