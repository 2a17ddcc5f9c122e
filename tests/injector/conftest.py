"""Fixtures for the injector: a TLS identity, the injector as a real process, its registration.

The injector runs as ``grelmicro-sidecar injector`` (a subprocess) serving
HTTPS on 127.0.0.1 with a certificate from a CA made here; the real API server
calls it through a MutatingWebhookConfiguration built by
``sidecar.injector.webhookconfig`` and narrowed to the test's namespace, so
tests never affect each other's pods.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from sidecar.injector.webhookconfig import (
    NAME_LABEL,
    WEBHOOK_NAME,
    ca_bundle_of,
    webhook_configuration,
)
from tests.cluster import ControlPlane, free_port
from tests.cluster.pki import CertificateAuthority
from tests.metrics import samples
from tests.sidecar.proc import BIN

EXE = BIN  # the console script of the virtualenv running the tests
IMAGE = "registry.example/grelmicro-sidecar:test"
INJECT = "leader-election.grelmicro.io/inject"


@dataclass
class Tls:
    ca_pem: bytes
    cert: Path
    key: Path


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca = CertificateAuthority.create("grelmicro-injector-test-ca")
    cert, key = ca.issue("injector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    d = tmp_path_factory.mktemp("injector-tls")
    (d / "tls.crt").write_bytes(cert)
    (d / "tls.key").write_bytes(key)
    return Tls(ca.cert_pem, d / "tls.crt", d / "tls.key")


class Injector:
    """One ``grelmicro-sidecar injector`` process."""

    def __init__(
        self,
        cluster: ControlPlane,
        tls: Tls,
        log: Path,
        *extra: str,
        kubeconfig: Path | None = None,
    ):
        self.port = free_port()
        self.health_port = free_port()
        self.log = log
        self.argv = [
            str(EXE),
            "injector",
            f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--health-port={self.health_port}",
            f"--tls-cert-file={tls.cert}",
            f"--tls-key-file={tls.key}",
            f"--sidecar-image={IMAGE}",
            "--sweep-interval=0",
            # Stopped at once (the drain has tests of its own: tests/unit/injector/test_server.py
            # and tests/e2e), and pods of namespaces without Lease RBAC admitted, but where a
            # test turns the check on (test_lease_access.py).
            "--drain-delay=0",
            "--check-lease-access=false",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/inject"

    def start(self, timeout: float = 60.0, *, uid: int | None = None) -> Injector:
        """Start and wait until healthy; ``uid`` runs it as that user (and group), as a pod would."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRELMICRO_INJECTOR_")}
        argv = self.argv
        if uid is not None:
            # setpriv switches user and group; CAP_DAC_READ_SEARCH (ambient) only lets the
            # process read the test virtualenv, whose interpreter may sit in a root-only home.
            argv = [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=+dac_read_search",
                "--ambient-caps=+dac_read_search",
                *argv,
            ]
            env = {
                k: v for k, v in env.items() if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")
            }
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"injector exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
                ) as resp:
                    if resp.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"injector not healthy after {timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.health_port}/metrics", timeout=5
        ) as resp:
            return samples(resp.read().decode())

    def admissions(self) -> float:
        return sum(
            v
            for k, v in self.metrics().items()
            if k.startswith("grelmicro_injector_admissions_total")
        )

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def injector(
    cluster: ControlPlane, tls: Tls, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Injector]:
    """The shared injector (no sweep)."""
    proc = Injector(cluster, tls, tmp_path_factory.mktemp("injector") / "injector.log").start()
    yield proc
    proc.stop()


def scoped_configuration(url: str, ca_pem: bytes, namespace: str) -> dict[str, Any]:
    """The product's configuration, unique in name and narrowed to one namespace."""
    config = webhook_configuration(
        ca_bundle_of(ca_pem),
        url=url,
        excluded_namespaces=("kube-system",),
        name=f"grelmicro-sidecar-injector-{namespace}",
    )
    for hook in config["webhooks"]:  # both: by annotation, and by the namespace's label
        hook["namespaceSelector"]["matchExpressions"].append(
            {"key": NAME_LABEL, "operator": "In", "values": [namespace]}
        )
    return config


def annotated_pod(
    name: str, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {INJECT: "true", **(annotations or {})}},
        "spec": {"containers": [{"name": "app", "image": "busybox"}], **spec},
    }


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def wait_for_default_service_account(api: Any, namespace: str, timeout: float = 30.0) -> None:
    """Pods are refused until the controller-manager made the namespace's ``default`` SA."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


@dataclass
class Registration:
    name: str
    config: dict[str, Any]


def register(
    api: Any, url: str, ca_pem: bytes, namespace: str, timeout: float = 30.0
) -> Registration:
    """Create the configuration and wait until the API server calls the webhook with it."""
    wait_for_default_service_account(api, namespace)
    admission = client.AdmissionregistrationV1Api(api)
    config = scoped_configuration(url, ca_pem, namespace)
    admission.create_mutating_webhook_configuration(config)
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    probe = annotated_pod(f"probe-{uuid.uuid4().hex[:6]}")
    while True:  # the API server picks new configurations up from an informer, not at once
        try:
            made = core.create_namespaced_pod(namespace, probe, dry_run="All")
            if any(c.name == "grelmicro-sidecar" for c in made.spec.init_containers or []):
                break
        except ApiException as err:
            message = json.loads(err.body or "{}").get("message", "")
            if f'admission webhook "{WEBHOOK_NAME}" denied the request' in message:
                break  # live: it answered (a refusal, e.g. of a ServiceAccount without Leases)
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("the webhook configuration did not take effect")
        time.sleep(0.1)
    return Registration(config["metadata"]["name"], config)


def unregister(api: Any, name: str) -> None:
    try:
        client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(name)
    except ApiException as err:
        if err.status != 404:
            raise


@pytest.fixture
def webhook(api: Any, injector: Injector, tls: Tls, namespace: str) -> Iterator[Registration]:
    reg = register(api, injector.url, tls.ca_pem, namespace)
    yield reg
    unregister(api, reg.name)


def audit_events(
    cluster: ControlPlane, namespace: str, resource: str = "pods"
) -> list[dict[str, Any]]:
    return [
        event
        for event in cluster.audit_events()
        if (ref := event.get("objectRef") or {}).get("namespace") == namespace
        and ref.get("resource") == resource
    ]
