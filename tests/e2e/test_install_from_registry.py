"""Installed from a registry, exactly as README says: the release, published, then README's
"Install on your cluster" block run word for word against the user's Deployment.

A registry on this machine stands in for ghcr.io (``registry`` and ``published``
in conftest.py): the node's containerd mirrors ghcr.io to it, ``make release``'s
image and chart are pushed to it by ``hack/publish.sh`` (the release workflow's
own push), and the user's commands run in a private mount namespace whose
``/etc/hosts`` sends ghcr.io there (``tests/e2e/readme.py``). Then, on a namespace
``my-app`` (Pod Security ``restricted``) with a Deployment ``my-app`` of three
replicas whose app reads the sidecar's state file, README's block runs
unchanged, and the test checks that the chart came from the registry, that the
node pulled the sidecar's image from it by the release's digest, and that
``my-app`` has exactly one leader (``kubectl get leases`` and the state files).
Everything is uninstalled and deleted at the end, the registry stopped.

It needs a cluster where no release of the chart is installed yet (README's
commands use the defaults): ``fresh_cluster`` runs it before the other tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import readme
from tests.e2e.conftest import Cluster, Published, wait_for

pytestmark = [pytest.mark.timeout(3600), pytest.mark.fresh_cluster]

INSTALL = "## Install on your cluster"
NAMESPACE = "my-app"
APP = "my-app"
SYSTEM = "grelmicro-system"
APP_IMAGE = "curlimages/curl:8.11.1"  # the examples' app image (a Debian stand-in on our node)
# The app: reads the state file its sidecar writes and prints whether it leads.
APP_SCRIPT = r"""
trap 'exit 0' TERM
while true; do
  if [ -f "${LEADER_ELECTION_STATE_FILE:-/nonexistent}" ]; then
    grep -o '"is_leader": *[a-z]*' "$LEADER_ELECTION_STATE_FILE" || true
  fi
  sleep 1
done
"""


def deployment() -> dict[str, Any]:
    """The user's Deployment before README: three replicas, no annotation yet."""
    labels = {"app.kubernetes.io/name": APP}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
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
                            "command": ["sh", "-c", APP_SCRIPT],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"memory": "32Mi"},
                            },
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


def _cleanup(e2e: Cluster, shell: readme.UserShell) -> None:
    shell.run(f"helm uninstall grelmicro-sidecar --namespace {SYSTEM} --wait || true")
    # Kept on uninstall by design (README); this cluster is shared with the tests after this one.
    e2e.kubectl("delete", "clusterrole", "grelmicro-sidecar-leases", "--ignore-not-found")
    for namespace in (NAMESPACE, SYSTEM):
        e2e.kubectl(
            "delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=180
        )


def _state(e2e: Cluster, pod: str) -> dict[str, Any]:
    out = e2e.kubectl(
        "exec", "-n", NAMESPACE, pod, "-c", "app", "--", "sh", "-c",
        'cat "$LEADER_ELECTION_STATE_FILE"',
    ).stdout  # fmt: skip
    state: dict[str, Any] = json.loads(out)
    return state


def _one_leader(e2e: Cluster, pods: list[str]) -> str | None:
    """The leader, when exactly one pod's state file says it leads and all name it holder."""
    states = {}
    for pod in pods:
        try:
            states[pod] = _state(e2e, pod)
        except (AssertionError, json.JSONDecodeError):
            return None
    leaders = [pod for pod, s in states.items() if s["is_leader"]]
    if len(leaders) != 1 or any(s["holder"] != leaders[0] for s in states.values()):
        return None
    return leaders[0]


def test_readme_installs_the_published_release_and_my_app_gets_one_leader(
    e2e: Cluster, published: Published, tmp_path: Path
) -> None:
    try:
        install = readme.block(INSTALL)
    except readme.MissingBlock as err:
        pytest.fail(f"{err}: the block README's users copy is what this test runs")
    installed = e2e.helm("list", "--all-namespaces", "-o", "json").stdout
    assert json.loads(installed) == [], (
        f"README installs the chart with its defaults on a cluster that has none yet: {installed}"
    )
    registry, version, digest = published.registry, published.version, published.digest
    shell = readme.UserShell(e2e.kubeconfig, tmp_path / "home", registry)
    before = len(registry.requests())

    try:
        # The user's namespace and Deployment, running before the sidecar is added.
        e2e.kubectl("create", "namespace", NAMESPACE)
        e2e.kubectl(
            "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
        )
        e2e.kubectl("apply", "-f", "-", input=json.dumps(deployment()))
        e2e.kubectl(
            "rollout", "status", "-n", NAMESPACE, f"deployment/{APP}", "--timeout=180s",
            timeout=200,
        )  # fmt: skip

        ran = shell.run(install, timeout=900)
        assert ran.ok, f"README's install block failed:\n{ran.output}"

        # The chart came from the registry: helm fetched its manifest and its layer there.
        pulled = [r for r in registry.requests()[before:] if r.method == "GET" and r.status < 400]
        chart_paths = [r.path for r in pulled if r.path.startswith("/v2/grelinfo/charts/")]
        assert f"/v2/grelinfo/charts/grelmicro-sidecar/manifests/{version}" in chart_paths, pulled
        assert any("/blobs/sha256:" in p for p in chart_paths), chart_paths
        [listed] = json.loads(
            shell.run(f"helm list --namespace {SYSTEM} -o json", trace=False).output
        )
        assert (listed["chart"], listed["status"]) == (f"grelmicro-sidecar-{version}", "deployed")
        values = shell.run(f"helm get values grelmicro-sidecar -n {SYSTEM} -o json", trace=False)
        assert json.loads(values.output) in (None, {})  # README sets no value: the defaults

        # The node pulled the sidecar's image from the registry, by the release's digest.
        image_paths = [
            r.path for r in pulled if r.path.startswith("/v2/grelinfo/grelmicro-sidecar/")
        ]
        assert f"/v2/grelinfo/grelmicro-sidecar/manifests/{digest}" in image_paths, pulled
        assert any("/blobs/sha256:" in p for p in image_paths), image_paths
        by_node = [r for r in pulled if r.path.startswith("/v2/grelinfo/grelmicro-sidecar/")]
        assert all(r.query == "ns=ghcr.io" for r in by_node), by_node  # containerd's mirror
        expected = f"ghcr.io/grelinfo/grelmicro-sidecar@{digest}"
        pods = e2e.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={APP}")
        running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        assert len(running) == 3, [p["metadata"]["name"] for p in running]
        for pod in running:
            [sidecar_status] = [
                s
                for s in pod["status"].get("initContainerStatuses", [])
                if s["name"] == "grelmicro-sidecar"
            ]
            assert sidecar_status["imageID"] == expected, sidecar_status
        injector = e2e.json("get", "pods", "-n", SYSTEM)["items"]
        assert injector and all(
            s["imageID"] == expected for p in injector for s in p["status"]["containerStatuses"]
        ), [s["imageID"] for p in injector for s in p["status"]["containerStatuses"]]

        # Exactly one leader in my-app: the Lease's holder, and the one state file that says so.
        names = [p["metadata"]["name"] for p in running]
        leader = wait_for(lambda: _one_leader(e2e, names), 60, "one leader in the state files")
        leases = e2e.json("get", "leases", "-n", NAMESPACE)["items"]
        holders = [lease["spec"].get("holderIdentity") for lease in leases]
        assert holders.count(leader) == 1 and [h for h in holders if h in names] == [leader], leases
        assert (
            f"leader-{APP}" in ran.output and leader in ran.output
        )  # `kubectl get leases` showed it
    finally:
        _cleanup(e2e, shell)
