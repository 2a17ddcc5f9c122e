"""The chart against the real API server: dry runs, then install, upgrade, uninstall.

The control plane has no kubelet, so the injector Deployment's pods never run;
the chart's ``webhook.url`` points the API server at a ``LocalInjector`` instead,
which runs with the chart's own Deployment args and env, TLS Secret and
ServiceAccount. Everything else is the real thing: helm, the API server's
admission chain, RBAC, the controller-manager creating pods from Deployments.
"""

from __future__ import annotations

import base64
import itertools
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.cluster import ControlPlane, free_port
from tests.ship import render as render_module
from tests.ship.tools import (
    CHART,
    MANIFESTS,
    LocalInjector,
    annotated_pod,
    create_pod,
    docs,
    helm,
    kubectl_json,
    set_args,
    sidecar_of,
    template,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)


def _dry_run(cluster: ControlPlane, text: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)
        # A fresh namespace gets its default ServiceAccount a moment after it is created.
        if (
            result.returncode == 0
            or "serviceaccount" not in result.stderr
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.2)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def second_namespace(cluster: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.kubectl("create", "namespace", name)
    # Pods are refused until the controller-manager gives the namespace its default
    # ServiceAccount (on a cluster that just started, that can take seconds).
    wait_for(
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
        30,
        f"the default ServiceAccount of {name}",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"webhook.url": "https://127.0.0.1:9443/inject", "injector.autoRBAC": True},
        {
            "injector.replicas": 3,
            "webhook.excludedNamespaces": ["ops"],
            "serviceAccount.name": "custom",
        },
    ],
    ids=["defaults", "url-auto-rbac", "custom"],
)
def test_rendered_chart_passes_server_side_dry_run(
    cluster: ControlPlane, namespace: str, second_namespace: str, values: dict[str, Any]
) -> None:
    values = {
        **values,
        "workloadRBAC": [{"namespace": second_namespace, "serviceAccounts": ["default", "worker"]}],
        "test.namespace": second_namespace,  # helm test's hooks, dry-run into an existing namespace
    }
    objects = docs(template(values, release="dry", namespace=namespace).stdout)
    for obj in objects:
        if obj["kind"] == "Pod":
            # A dry run stores nothing, so the test pod's own ServiceAccount (another
            # object of this batch) does not exist for the ServiceAccount admission check.
            obj["spec"]["serviceAccountName"] = "default"
    out = _dry_run(cluster, "\n---\n".join(json.dumps(o) for o in objects))
    for kind in (
        "serviceaccount",
        "secret",
        "clusterrole.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "service",
        "deployment.apps",
        "poddisruptionbudget.policy",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io",
        "role.rbac.authorization.k8s.io",
        "rolebinding.rbac.authorization.k8s.io",
        "configmap",
        "pod",
    ):
        assert f"{kind}/" in out, f"no {kind} in:\n{out}"
    assert out.count("(server dry run)") == len(objects)


# A stand-in for cert-manager's CRDs: the kinds, group, version and scope are
# real, but the schema accepts any spec (cert-manager's own CRDs are not
# available here), so this checks the objects' identity, not their fields.
CERT_MANAGER_CRDS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    for plural, kind in (("certificates", "Certificate"), ("issuers", "Issuer"))
]


@pytest.fixture
def cert_manager_kinds(cluster: ControlPlane) -> Iterator[None]:
    text = "\n---\n".join(json.dumps(c) for c in CERT_MANAGER_CRDS)
    cluster.kubectl("apply", "-f", "-", input=text)
    for crd in CERT_MANAGER_CRDS:
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )
    yield
    for crd in CERT_MANAGER_CRDS:
        cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=false", check=False)


def test_cert_manager_rendering_and_install_yaml_pass_server_side_dry_run(
    cluster: ControlPlane, namespace: str, cert_manager_kinds: None
) -> None:
    out = _dry_run(
        cluster,
        template({"tls.certManager.enabled": True}, skip_tests=True, namespace=namespace).stdout,
    )
    assert out.count("certificate.cert-manager.io/") == 2
    assert out.count("issuer.cert-manager.io/") == 2

    # install.yaml as users apply it: its namespace, then everything in it.
    committed = (MANIFESTS / "install.yaml").read_text()
    assert committed == render_module.install_yaml()
    objects = docs(committed)
    namespace_obj = objects[0]
    assert namespace_obj["kind"] == "Namespace"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace_obj))
    try:
        out = _dry_run(cluster, committed)
        assert out.count("(server dry run)") == len(objects)
    finally:
        cluster.kubectl("delete", "namespace", namespace_obj["metadata"]["name"], "--wait=false")


# ---- the life of a release ---------------------------------------------------------


def _manifest_objects(
    cluster: ControlPlane, release: str, namespace: str
) -> list[tuple[str, str, str | None]]:
    text = helm(
        "get", "manifest", release, f"--namespace={namespace}", kubeconfig=cluster.kubeconfig
    ).stdout
    out = []
    for obj in docs(text):
        meta = obj["metadata"]
        out.append((obj["kind"], meta["name"], meta.get("namespace")))
    return out


def _exists(cluster: ControlPlane, kind: str, name: str, namespace: str | None) -> bool:
    args = ["get", kind, name, "-o", "name"]
    if namespace:
        args += ["-n", namespace]
    result = cluster.kubectl(*args, check=False)
    if result.returncode == 0:
        return True
    assert "NotFound" in result.stderr, result.stderr
    return False


def _install(
    cluster: ControlPlane,
    release: str,
    namespace: str,
    values: dict[str, Any],
    *,
    upgrade: bool = False,
) -> str:
    verb = ["upgrade", "--reuse-values"] if upgrade else ["install"]
    return helm(
        *verb,
        release,
        str(CHART),
        f"--namespace={namespace}",
        *set_args(values),
        kubeconfig=cluster.kubeconfig,
    ).stdout


def test_install_answers_upgrades_and_uninstalls(
    cluster: ControlPlane, namespace: str, second_namespace: str, tmp_path: Path
) -> None:
    release = f"r{uuid.uuid4().hex[:6]}"
    fullname = f"{release}-grelmicro-sidecar"
    port = free_port()
    workload = second_namespace
    values = {
        "webhook.url": f"https://127.0.0.1:{port}/inject",
        "image.repository": "registry.example/grelmicro-sidecar",
        "sidecar.resources.requests.cpu": "15m",
        "workloadRBAC": [{"namespace": workload}],
    }
    notes = _install(cluster, release, namespace, values)
    assert f"helm test {release} -n {namespace}" in notes
    # NOTES.txt is all a chart user has: it names nothing the package lacks (no repository
    # file), and the one command that grants the Leases, with this release's ClusterRole.
    assert "manifests/" not in notes and "README" not in notes and ".yaml" not in notes, notes
    assert f"done by this release for namespace {workload}" in notes
    assert (
        "kubectl create rolebinding grelmicro-sidecar --namespace <namespace> \\\n"
        f"      --clusterrole={fullname}-leases --serviceaccount=<namespace>:<serviceaccount>"
    ) in notes, notes
    try:
        # -- every object the chart rendered exists
        objects = _manifest_objects(cluster, release, namespace)
        kinds = {k for k, _, _ in objects}
        assert kinds == {
            "ServiceAccount",
            "Secret",
            "ClusterRole",
            "ClusterRoleBinding",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Role",
            "RoleBinding",
        }
        for kind, name, ns in objects:
            assert _exists(cluster, kind, name, ns), f"{kind}/{name} missing after install"
        pods = wait_for(
            lambda: kubectl_json(
                cluster,
                "get",
                "pods",
                "-n",
                namespace,
                "-l",
                "app.kubernetes.io/component=injector",
            )["items"],
            60,
            "the injector Deployment's pods",
        )
        assert len(pods) == 2  # created by the controller-manager; nothing runs them here
        # Rendered empty: the injector makes its own certificate and sets the webhook's bundle.
        assert "data" not in kubectl_json(
            cluster, "get", "secret", f"{fullname}-tls", "-n", namespace
        )
        webhook = kubectl_json(
            cluster, "get", "mutatingwebhookconfiguration", f"{fullname}-injector"
        )
        assert all("caBundle" not in w["clientConfig"] for w in webhook["webhooks"])

        # -- the webhook answers, through the API server, with the chart's TLS
        injector = LocalInjector(cluster, namespace, fullname, port, tmp_path / "v1").start()
        secret = kubectl_json(cluster, "get", "secret", f"{fullname}-tls", "-n", namespace)["data"]
        webhook = kubectl_json(
            cluster, "get", "mutatingwebhookconfiguration", f"{fullname}-injector"
        )
        ca_bundle = webhook["webhooks"][0]["clientConfig"]["caBundle"]
        assert [w["clientConfig"]["caBundle"] for w in webhook["webhooks"]] == [
            secret["ca.crt"]
        ] * 2
        try:
            made = create_pod(cluster, workload, annotated_pod("injected"))
            assert made.returncode == 0, made.stderr + injector.log()
            sidecar = sidecar_of(json.loads(made.stdout))
            assert sidecar is not None, made.stdout
            assert sidecar["image"] == "registry.example/grelmicro-sidecar:0.1.0"
            assert sidecar["resources"]["requests"]["cpu"] == "15m"
            plain = json.loads(
                create_pod(cluster, workload, annotated_pod("plain", inject=False)).stdout
            )
            assert sidecar_of(plain) is None
            excluded = json.loads(create_pod(cluster, namespace, annotated_pod("excluded")).stdout)
            assert (
                sidecar_of(excluded) is None
            )  # the release's namespace is never sent to the webhook
            bad = create_pod(
                cluster,
                workload,
                annotated_pod("bad", {"leader-election.grelmicro.io/port": "http"}),
            )
            assert bad.returncode != 0 and "leader-election.grelmicro.io/port" in bad.stderr

            # (helm test runs for real, on the node: tests/e2e/test_chart.py)

            # -- helm upgrade keeps what the injector wrote (no template sets it), so the
            # running injector keeps answering ...
            _install(
                cluster, release, namespace, {"sidecar.resources.requests.cpu": "25m"}, upgrade=True
            )
            assert (
                kubectl_json(cluster, "get", "secret", f"{fullname}-tls", "-n", namespace)["data"]
                == secret
            )
            webhook = kubectl_json(
                cluster, "get", "mutatingwebhookconfiguration", f"{fullname}-injector"
            )
            assert [w["clientConfig"]["caBundle"] for w in webhook["webhooks"]] == [ca_bundle] * 2
            still = json.loads(create_pod(cluster, workload, annotated_pod("after-upgrade")).stdout)
            assert sidecar_of(still) is not None
        finally:
            injector.stop()
        # ... and rolls the injector out with the new values and the same certificate.
        deploy = kubectl_json(cluster, "get", "deployment", fullname, "-n", namespace)
        assert deploy["metadata"]["generation"] == 2
        with LocalInjector(cluster, namespace, fullname, port, tmp_path / "v2") as injector:
            made = create_pod(cluster, workload, annotated_pod("rolled"))
            assert made.returncode == 0, made.stderr + injector.log()
            assert sidecar_of(json.loads(made.stdout))["resources"]["requests"]["cpu"] == "25m"
            assert "forbidden" not in injector.log().lower(), injector.log()
    finally:
        objects = _manifest_objects(cluster, release, namespace)
        helm(
            "uninstall",
            release,
            f"--namespace={namespace}",
            "--wait",
            kubeconfig=cluster.kubeconfig,
        )
    # -- helm uninstall removes everything it made, but the Lease grants running sidecars use
    kept = {("ClusterRole", f"{fullname}-leases"), ("Role", "grelmicro-sidecar-leases"),
            ("RoleBinding", "grelmicro-sidecar-leases-default")}  # fmt: skip
    for kind, name, ns in objects:
        if (kind, name) in kept:
            assert _exists(cluster, kind, name, ns), f"{kind}/{name} was not kept"
            continue
        wait_for(
            lambda k=kind, n=name, s=ns: not _exists(cluster, k, n, s), 60, f"{kind}/{name} deleted"
        )
    assert {(k, n) for k, n, _ in objects} >= kept
    assert not _exists(cluster, "mutatingwebhookconfiguration", f"{fullname}-injector", None)
    # With the webhook gone, annotated pods are created as they are (and nothing fails closed).
    after = create_pod(cluster, workload, annotated_pod("after-uninstall"))
    assert after.returncode == 0, after.stderr
    assert sidecar_of(json.loads(after.stdout)) is None
    assert base64.b64decode(ca_bundle).startswith(b"-----BEGIN CERTIFICATE-----")


def test_auto_rbac_works_with_exactly_the_chart_cluster_role(
    cluster: ControlPlane, namespace: str, second_namespace: str, tmp_path: Path
) -> None:
    """The injector, as the chart's ServiceAccount, creates the Lease Role and binding for a pod's account.

    Kubernetes refuses a Role granting verbs its creator does not hold: this
    proves the chart's ClusterRole holds them, and that kopf's pod watch is allowed.
    """
    release = f"a{uuid.uuid4().hex[:6]}"
    fullname = f"{release}-grelmicro-sidecar"
    port = free_port()
    _install(
        cluster,
        release,
        namespace,
        {"webhook.url": f"https://127.0.0.1:{port}/inject", "injector.autoRBAC": True},
    )
    try:
        with LocalInjector(cluster, namespace, fullname, port, tmp_path) as injector:
            made = create_pod(cluster, second_namespace, annotated_pod("auto"))
            assert made.returncode == 0, made.stderr + injector.log()

            def granted() -> bool:
                role = _exists(cluster, "role", "grelmicro-sidecar-leases", second_namespace)
                binding = _exists(
                    cluster, "rolebinding", "grelmicro-sidecar-leases-default", second_namespace
                )
                return role and binding

            try:
                wait_for(granted, 30, "the injector's auto-RBAC Role and RoleBinding")
            except AssertionError:
                raise AssertionError(injector.log()) from None
            can = cluster.kubectl(
                "auth",
                "can-i",
                "update",
                "leases.coordination.k8s.io",
                "-n",
                second_namespace,
                "--as",
                f"system:serviceaccount:{second_namespace}:default",
            )
            assert can.stdout.strip() == "yes"
            # Pods of earlier tests, in namespaces being deleted, may be seen too: judge ours only.
            ours = [line for line in injector.log().splitlines() if second_namespace in line]
            assert ours and not [line for line in ours if "forbidden" in line.lower()], ours
            assert "not currently held" not in injector.log(), injector.log()
    finally:
        helm("uninstall", release, f"--namespace={namespace}", kubeconfig=cluster.kubeconfig)


def test_two_injectors_renew_the_certificate_and_ca_before_they_end_refusing_nothing(
    cluster: ControlPlane, namespace: str, second_namespace: str, tmp_path: Path
) -> None:
    """Rotation, tested rather than promised: a certificate of 1 minute and a CA of 2 (renewed in
    their last third) kept by two replicas sharing the Secret, while a pod is admitted every
    half second through the API server for 110 s. Every one is injected; the served
    certificate is renewed, the CA joins the bundle before it signs, and the bundle follows."""
    release = f"t{uuid.uuid4().hex[:6]}"
    fullname = f"{release}-grelmicro-sidecar"
    port, other = free_port(), free_port()
    values = {
        "webhook.url": f"https://127.0.0.1:{port}/inject",
        "tls.certValidity": "1m",
        "tls.caValidity": "2m",
        "workloadRBAC": [{"namespace": second_namespace}],
    }
    _install(cluster, release, namespace, values)
    try:
        with (
            LocalInjector(cluster, namespace, fullname, port, tmp_path / "a"),
            LocalInjector(cluster, namespace, fullname, other, tmp_path / "b") as second,
        ):
            served: list[tuple[int, str]] = []  # (serial, issuer) of the served certificate
            bundles: list[str] = []
            failures: list[str] = []
            start = time.monotonic()
            deadline = start + 110
            admitted = [start]  # when each admission was answered
            count = 0
            while time.monotonic() < deadline:
                pem = ssl.get_server_certificate(("127.0.0.1", port))
                cert = x509.load_pem_x509_certificate(pem.encode())
                issuer = cert.issuer.rfc4514_string()
                if not served or served[-1][0] != cert.serial_number:
                    served.append((cert.serial_number, issuer))
                webhook = kubectl_json(
                    cluster, "get", "mutatingwebhookconfiguration", f"{fullname}-injector"
                )
                bundle = webhook["webhooks"][0]["clientConfig"]["caBundle"]
                if not bundles or bundles[-1] != bundle:
                    bundles.append(bundle)
                trusted = [c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(
                    base64.b64decode(bundle))]  # fmt: skip
                if issuer not in trusted:
                    failures.append(f"served a certificate of {issuer}, bundle {trusted}")
                made = cluster.kubectl(
                    "create", "-n", second_namespace, "--dry-run=server", "-o", "json", "-f", "-",
                    input=json.dumps(annotated_pod(f"p{count}")), check=False,
                )  # fmt: skip
                count += 1
                if made.returncode != 0 or sidecar_of(json.loads(made.stdout)) is None:
                    failures.append(made.stderr.strip() or "not injected")
                admitted.append(time.monotonic())
                time.sleep(0.5)
            log = second.log()
        assert not failures, failures[:5]
        issuers = [i for _, i in served]
        assert len(served) >= 3, served  # renewed by the same CA, then by the new one
        assert len(set(issuers)) >= 2, served  # a new CA signed, once it had settled
        assert len(bundles) >= 2, "the CA bundle never changed"
        # Admissions covered the whole run, rotations included: no stretch went untried.
        # (A count of them measured how fast kubectl starts on a loaded machine.)
        gaps = [b - a for a, b in itertools.pairwise(admitted)]
        assert count >= 60 and max(gaps) < 5, (count, max(gaps))
        assert "cannot keep the serving certificate" not in log, log
    finally:
        helm("uninstall", release, f"--namespace={namespace}", kubeconfig=cluster.kubeconfig)


def test_network_policy_and_dashboard_pass_server_side_dry_run(
    cluster: ControlPlane, namespace: str
) -> None:
    values = {"networkPolicy.enabled": True, "monitoring.dashboard.enabled": True}
    objects = [
        o
        for o in docs(template(values, release="np", namespace=namespace).stdout)
        if o["kind"] == "NetworkPolicy" or o["metadata"]["name"].endswith("-dashboard")
    ]
    assert sorted(o["kind"] for o in objects) == ["ConfigMap", "NetworkPolicy"]
    out = _dry_run(cluster, "\n---\n".join(json.dumps(o) for o in objects))
    assert out.count("(server dry run)") == 2, out
