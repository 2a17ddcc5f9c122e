"""manifests/: rbac.yaml, the examples and the leader-only script, each against the real thing.

- the hand-written sidecar is exactly what the injector adds (its pure patch);
- rbac.yaml is enough for a real ``grelmicro-sidecar run`` and grants nothing more;
- the examples, applied with kustomize into a namespace that enforces Pod
  Security "restricted", get their pods created and injected through the chart's
  webhook (a ``LocalInjector``);
- leader-only-work.sh works only while its sidecar leads.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.injector.patch import SidecarSpec, decide
from tests.cluster import ControlPlane, free_port, images
from tests.patched import patched
from tests.ship.tools import (
    CHART,
    MANIFESTS,
    LocalInjector,
    docs,
    helm,
    kubectl_json,
    service_account_kubeconfig,
    set_args,
    sidecar_of,
    wait_for,
)
from tests.sidecar.proc import SidecarProcess

pytestmark = pytest.mark.timeout(180)
EXAMPLES = MANIFESTS / "examples"
SCRIPT = EXAMPLES / "leader-only-work.sh"
STATE_ENV = (
    "LEADER_ELECTION_STATE_FILE",
    "LEADER_ELECTION_URL",
    "LEADER_ELECTION_ACK_FILE",
    "LEADER_ELECTION_DRAINED_URL",
)
OURS = ("leader-election", "leader-election-ack")


def _example(name: str, kind: str = "Deployment") -> dict[str, Any]:
    [obj] = [d for d in docs((EXAMPLES / name).read_text()) if d["kind"] == kind]
    return obj


def test_manual_sidecar_is_exactly_what_the_injector_adds() -> None:
    manual = _example("manual-sidecar.yaml")
    template = manual["spec"]["template"]
    spec = template["spec"]
    [sidecar] = spec["initContainers"]
    election = next(a.split("=", 1)[1] for a in sidecar["args"] if a.startswith("--election="))

    # The same pod as a user would write it for the injector: no sidecar, no
    # shared volume, no state env, and the annotations instead.
    plain = copy.deepcopy(template)
    plain["metadata"]["annotations"] = {
        "leader-election.grelmicro.io/inject": "true",
        "leader-election.grelmicro.io/name": election,
    }
    plain_spec = plain["spec"]
    del plain_spec["initContainers"]
    plain_spec["volumes"] = [v for v in plain_spec["volumes"] if v["name"] not in OURS]
    for c in plain_spec["containers"]:
        c["env"] = [e for e in c.get("env", []) if e["name"] not in STATE_ENV]
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in OURS]

    decision = decide(plain, SidecarSpec(image=sidecar["image"]))
    assert decision.outcome == "injected", decision.message
    assert patched(plain, decision)["spec"] == spec
    # and the injector leaves the hand-written one alone (it carries no annotation anyway)
    assert (
        decide(
            {**template, "metadata": plain["metadata"]}, SidecarSpec(image=sidecar["image"])
        ).outcome
        == "unchanged"
    )


def test_example_images_are_pinned_and_the_project_image_matches_the_chart() -> None:
    chart_version = next(
        line.split('"')[1]
        for line in (CHART / "Chart.yaml").read_text().splitlines()
        if line.startswith("appVersion:")
    )
    for name in (
        "deployment.yaml",
        "leader-service.yaml",
        "gated-readiness.yaml",
        "manual-sidecar.yaml",
    ):
        spec = _example(name)["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            image = c["image"]
            assert ":" in image and not image.endswith(":latest"), f"{name}: {image} is not pinned"
            if image.rsplit("/", 1)[-1].startswith("grelmicro-sidecar:"):
                # The image the chart installs by default (and the one the e2e node preloads).
                repository, _, tag = image.rpartition(":")
                assert tag == chart_version, f"{name}: {image}"
                assert f"{images.full_reference(repository)}:{tag}" == (
                    images.product_image_name()
                ), f"{name}: {image} is not the chart's default image"


@pytest.fixture
def workload_namespace(cluster: ControlPlane) -> Iterator[str]:
    """A namespace that enforces Pod Security "restricted", as contract §8 asks of the sidecar."""
    name = f"w-{uuid.uuid4().hex[:10]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_rbac_yaml_is_enough_for_the_sidecar_and_grants_nothing_else(
    cluster: ControlPlane, workload_namespace: str, tmp_path: Path
) -> None:
    ns = workload_namespace
    cluster.kubectl("apply", "-n", ns, "-f", str(MANIFESTS / "rbac.yaml"))
    wait_for(
        lambda: cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
        30,
        "default SA",
    )
    kubeconfig = service_account_kubeconfig(cluster, ns, "default", tmp_path / "sa.kubeconfig")

    who = f"system:serviceaccount:{ns}:default"
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        assert (
            cluster.kubectl(
                "auth", "can-i", verb, "leases.coordination.k8s.io", "-n", ns, "--as", who
            ).stdout.strip()
            == "yes"
        )
    for args in (
        ("get", "secrets", "-n", ns),
        ("create", "pods", "-n", ns),
        ("list", "leases.coordination.k8s.io", "-n", "default"),
    ):
        assert (
            cluster.kubectl("auth", "can-i", *args, "--as", who, check=False).stdout.strip() == "no"
        ), args

    sidecar = SidecarProcess(tmp_path, kubeconfig, ns, "pod-0", election="rbac").start()
    try:
        wait_for(sidecar.leads, 30, "the sidecar to lead with rbac.yaml's permissions")
        sidecar.signal(signal.SIGTERM)
        assert sidecar.wait(20) == 0
    finally:
        sidecar.stop()
    assert "forbidden" not in sidecar.raw_log().lower(), sidecar.raw_log()
    lease = kubectl_json(cluster, "get", "lease", "leader-rbac", "-n", ns)
    assert lease["spec"].get("holderIdentity") in (None, "")  # released on SIGTERM


def test_examples_are_admitted_and_injected_in_a_restricted_namespace(
    cluster: ControlPlane, namespace: str, workload_namespace: str, tmp_path: Path
) -> None:
    release = f"e{uuid.uuid4().hex[:6]}"
    fullname = f"{release}-grelmicro-sidecar"
    port = free_port()
    helm(
        "install",
        release,
        str(CHART),
        f"--namespace={namespace}",
        *set_args({"webhook.url": f"https://127.0.0.1:{port}/inject"}),
        kubeconfig=cluster.kubeconfig,
    )
    try:
        with LocalInjector(cluster, namespace, fullname, port, tmp_path) as injector:
            ns = workload_namespace
            cluster.kubectl("apply", "-n", ns, "-f", str(MANIFESTS / "rbac.yaml"))
            # The account the label example runs as (manifests/leader-label.yaml makes it;
            # its cluster-wide policy is left to the tests that check it).
            cluster.kubectl("create", "serviceaccount", "-n", ns, "grelmicro-sidecar")
            # ... with the Leases (leader-label.yaml binds them too): without them the injector
            # refuses its pods (leaseaccess), as it would for a user.
            cluster.kubectl(
                "create", "rolebinding", "-n", ns, "grelmicro-sidecar-leases-grelmicro-sidecar",
                "--role=grelmicro-sidecar-leases", f"--serviceaccount={ns}:grelmicro-sidecar",
            )  # fmt: skip
            applied = cluster.kubectl("apply", "-n", ns, "-k", str(EXAMPLES))
            assert "configmap/leader-only-work-" in applied.stdout
            expected = {"worker": 3, "api": 2, "manual": 2}

            def pods() -> dict[str, list[dict[str, Any]]] | None:
                items = kubectl_json(cluster, "get", "pods", "-n", ns)["items"]
                by_app: dict[str, list[dict[str, Any]]] = {}
                for p in items:
                    by_app.setdefault(p["metadata"]["labels"]["app.kubernetes.io/name"], []).append(
                        p
                    )
                counts = {k: len(v) for k, v in by_app.items()}
                return by_app if counts == expected else None

            try:
                by_app = wait_for(
                    pods, 90, f"pods {expected} (restricted Pod Security must admit them)"
                )
            except AssertionError:
                events = cluster.kubectl(
                    "get", "events", "-n", ns, "-o", "custom-columns=REASON:.reason,MSG:.message"
                ).stdout
                raise AssertionError(f"{events}\n{injector.log()}") from None
            for app in ("worker", "api"):
                for pod in by_app[app]:
                    sidecar = sidecar_of(pod)
                    assert sidecar is not None, f"{app} pod not injected"
                    assert f"--election={app}" in sidecar["args"]
                    env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
                    assert set(STATE_ENV) <= env
            for pod in by_app["api"]:  # the leader label, not readiness, routes to the leader
                assert "--label-leader" in sidecar_of(pod)["args"]
                assert "readinessProbe" not in sidecar_of(pod)
            for pod in by_app["worker"]:
                assert "readinessProbe" not in sidecar_of(pod)
            for pod in by_app["manual"]:
                names = [c["name"] for c in pod["spec"]["initContainers"]]
                assert names == ["grelmicro-sidecar"]  # written by hand, not injected a second time
            service = kubectl_json(cluster, "get", "service", "api-leader", "-n", ns)
            assert service["spec"]["selector"] == {
                "app.kubernetes.io/name": "api",
                "leader-election.grelmicro.io/leader": "true",
            }
            assert service["spec"]["ports"][0]["targetPort"] == "http"
    finally:
        helm("uninstall", release, f"--namespace={namespace}", kubeconfig=cluster.kubeconfig)


def _run_script(url: str, rounds: int = 2) -> subprocess.CompletedProcess[str]:
    assert shutil.which("curl"), "leader-only-work.sh needs curl on PATH (apt-get install curl)"
    return subprocess.run(
        ["sh", str(SCRIPT)],
        env={**os.environ, "LEADER_URL": url, "ROUNDS": str(rounds), "INTERVAL": "0.2"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_leader_only_work_runs_only_on_the_leader(
    cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    one = SidecarProcess(tmp_path, cluster.kubeconfig, namespace, "pod-a", election="work").start()
    try:
        wait_for(one.leads, 30, "pod-a to lead")
        two = SidecarProcess(
            tmp_path, cluster.kubeconfig, namespace, "pod-b", election="work"
        ).start()
        try:
            wait_for(
                lambda: (two.state() or {}).get("holder") == "pod-a", 30, "pod-b to see pod-a lead"
            )
            token = one.state()["fencing_token"]
            lead = _run_script(f"http://127.0.0.1:{one.port}/leader")
            assert lead.returncode == 0, lead.stderr
            lines = lead.stdout.splitlines()
            assert len(lines) == 2
            assert all(
                f"leading (fencing token {token}): doing the leader-only work" in line
                for line in lines
            ), lines
            follow = _run_script(f"http://127.0.0.1:{two.port}/leader")
            assert follow.stdout.splitlines() and all(
                line.endswith("not the leader: skipping") for line in follow.stdout.splitlines()
            ), follow.stdout
        finally:
            two.stop()
    finally:
        one.stop()
    nobody = _run_script(f"http://127.0.0.1:{free_port()}/leader", rounds=1)
    assert nobody.returncode == 0 and nobody.stdout.strip().endswith("not the leader: skipping")
