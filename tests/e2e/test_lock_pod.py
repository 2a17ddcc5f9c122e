"""``grelmicro-sidecar lock`` in real pods: the product image as the app, one command at a time.

Two replicas of a Deployment whose container runs ``grelmicro-sidecar lock --
sh -c ...`` (PID 1, restricted Pod Security, read-only root filesystem, the
state in an emptyDir). Exactly one pod runs the command; deleting it makes the
kubelet SIGTERM the lock, which forwards it to the command, releases when the
command has exited, and the other pod's command starts after that, with a
larger fencing token (contract §7, ``lock``).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.cluster.images import product_image_name
from tests.e2e.conftest import Cluster, wait_for

SCRIPT = (
    'echo "started token=$LEADER_ELECTION_FENCING_TOKEN at $(date +%s.%N)"; '
    "trap 'echo \"stopping at $(date +%s.%N)\"; exit 0' TERM; "
    "while :; do sleep 0.2; done"
)


def locker(name: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "job",
                            "image": product_image_name(),
                            "imagePullPolicy": "IfNotPresent",
                            "command": [
                                "grelmicro-sidecar",
                                "lock",
                                "--election=job",
                                "--lease-duration=6s",
                                "--renew-deadline=4s",
                                "--retry-period=1s",
                                "--state-dir=/var/run/leader-election",
                                "--",
                                "sh",
                                "-c",
                                SCRIPT,
                            ],
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                }
                            ],
                            "volumeMounts": [
                                {"name": "state", "mountPath": "/var/run/leader-election"}
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                    "volumes": [{"name": "state", "emptyDir": {}}],
                },
            },
        },
    }


def _started(log: str) -> tuple[int, float] | None:
    match = re.search(r"started token=(\d+) at ([\d.]+)", log)
    return (int(match.group(1)), float(match.group(2))) if match else None


def test_one_pod_runs_the_command_and_the_other_takes_over_when_it_is_deleted(
    e2e: Cluster, workload_namespace: str, tmp_path: Path
) -> None:
    ns = workload_namespace
    e2e.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(locker("locker")))
    e2e.kubectl("rollout", "status", "-n", ns, "deployment/locker", "--timeout=120s")
    names = [p["metadata"]["name"] for p in e2e.json("get", "pods", "-n", ns)["items"]]
    logs = lambda pod: e2e.kubectl("logs", "-n", ns, pod, check=False).stdout  # noqa: E731

    def running() -> list[str]:
        return [n for n in names if _started(logs(n))]

    try:
        leader = wait_for(lambda: running() or None, 60, what="a command to start")
    except AssertionError as err:
        pods = e2e.kubectl("get", "pods", "-n", ns, "-o", "wide").stdout
        raise AssertionError(f"{err}\n{pods}\n" + "\n".join(logs(n) for n in names)) from None
    assert len(leader) == 1, {n: logs(n) for n in names}
    first = leader[0]
    token, _ = _started(logs(first))  # type: ignore[misc]
    holder = e2e.json("get", "lease", "leader-job", "-n", ns)["spec"]["holderIdentity"]
    assert holder.startswith(f"{first}-"), holder  # <pod>-<pid>: unique per process

    def current() -> list[str]:
        return [p["metadata"]["name"] for p in e2e.json("get", "pods", "-n", ns)["items"]]

    def successor() -> tuple[str, tuple[int, float]] | None:
        """The pod, other than the first, whose command started; the release names the
        candidate that joined last, which may be the first one's replacement."""
        started = [(n, when) for n in current() if n != first and (when := _started(logs(n)))]
        return started[0] if started else None

    saved = tmp_path / "first.log"
    with open(saved, "w") as sink:
        follow = subprocess.Popen(e2e.command("logs", "-f", "-n", ns, first), stdout=sink)
        e2e.kubectl("delete", "pod", "-n", ns, first, "--wait=false")
        try:
            other, second = wait_for(successor, 60, what="another pod's command")
        except AssertionError as err:  # say what the other pods and the Lease were doing
            lease = e2e.kubectl("get", "lease", "-n", ns, "-o", "yaml").stdout
            rest = "\n".join(f"--- {n}:\n{logs(n)}" for n in current() if n != first)
            raise AssertionError(f"{err}\n{lease}\n{rest}") from None
        follow.wait(60)
    stopped = re.search(r"stopping at ([\d.]+)", saved.read_text())
    assert stopped, saved.read_text()  # the SIGTERM was forwarded to the command
    assert second[0] > token
    assert float(stopped.group(1)) < second[1], "the successor's command started first"

    # The pod left waiting runs nothing: one command runs.
    wait_for(lambda: first not in current() and len(current()) == 2, 60, what="the replacement")
    assert [n for n in current() if _started(logs(n))] == [other]
