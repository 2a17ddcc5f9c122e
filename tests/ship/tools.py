"""What the shipping tests drive: the real helm and kubectl, and a local injector.

- ``helm(...)``/``template(...)``: the helm binary that ``tests.cluster.binaries``
  builds, with its cache and config kept out of the user's home.
- ``LocalInjector``: ``grelmicro-sidecar injector`` as a local process, started
  the way the chart's Deployment would start it (its args and env, the chart's
  TLS Secret, a token of the chart's ServiceAccount), listening where the
  chart's ``webhook.url`` points. The control plane has no kubelet, so this is
  how the chart's webhook gets a live backend.
- ``helm test`` runs for real, in a pod on the node: ``tests/e2e/test_chart.py``.

Test support only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import ControlPlane, binaries, free_port
from tests.sidecar.proc import wait_for as poll

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "grelmicro-sidecar"
MANIFESTS = ROOT / "manifests"
BIN = Path(sys.executable).parent  # the virtualenv's bin: grelmicro-sidecar, hadolint, shellcheck
#: Kubernetes version for rendering without a cluster (the chart needs >= 1.30).
KUBE_VERSION = "1.33.0"
RELEASE = "grelmicro-sidecar"
NAMESPACE = "grelmicro-system"

_HELM_HOME = Path(tempfile.gettempdir()) / f"grelmicro-sidecar-helm-{os.getuid()}"


def helm_binary() -> Path:
    return binaries.ensure("helm")["helm"]


def kubectl_binary() -> Path:
    return binaries.ensure("kubernetes")["kubectl"]


def helm(
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for var, sub in (
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
    ):
        env[var] = str(_HELM_HOME / sub)
    env.pop("KUBECONFIG", None)
    argv = [str(helm_binary()), *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[:3])} ... failed ({result.returncode}):\n{result.stderr}"
        )
    return result


def set_args(values: dict[str, Any] | None) -> list[str]:
    """``--set-json key=value`` for each dotted key (values keep their JSON type)."""
    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def template(
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    skip_tests: bool = False,
    show_only: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    args = [
        "template",
        release,
        str(CHART),
        f"--namespace={namespace}",
        f"--kube-version={KUBE_VERSION}",
    ]
    if skip_tests:
        args.append("--skip-tests")
    if show_only:
        args.append(f"--show-only={show_only}")
    return helm(*args, *set_args(values), check=check)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return docs(template(values, **kwargs).stdout)


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


# ---- the cluster ---------------------------------------------------------------


def kubectl_json(cluster: ControlPlane, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    return poll(predicate, timeout, interval=interval, what=what)


def service_account_kubeconfig(
    cluster: ControlPlane, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that authenticates with a fresh token of ``namespace/account``."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h"
    ).stdout.strip()
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = account
        ctx["context"]["namespace"] = namespace
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


class LocalInjector:
    """The chart's injector Deployment, run as a local process (no kubelet here).

    Takes the container's args and env from the Deployment the chart created
    and a token of the chart's ServiceAccount (so the chart's RBAC is what it
    runs with), and listens on 127.0.0.1:``port`` where the chart's
    ``webhook.url`` points. By default it makes its own certificate in the
    chart's Secret and sets the webhook's CA bundle, as in a pod; with the
    chart's cert-manager mode it serves the files of the Secret cert-manager
    would fill (a test fills it). It stops at once (no drain: tests/e2e drains).
    """

    def __init__(
        self, cluster: ControlPlane, namespace: str, deployment: str, port: int, workdir: Path
    ):
        self.cluster = cluster
        self.namespace = namespace
        self.deployment = deployment
        self.port = port
        self.health_port = free_port()
        self.workdir = workdir
        self.log_path = workdir / f"injector-{port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.container: dict[str, Any] = {}

    def start(self, timeout: float = 60) -> LocalInjector:
        self.workdir.mkdir(parents=True, exist_ok=True)
        deploy = kubectl_json(
            self.cluster, "get", "deployment", self.deployment, "-n", self.namespace
        )
        pod_spec = deploy["spec"]["template"]["spec"]
        self.container = pod_spec["containers"][0]
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        files = []
        if "tls" in volumes:  # cert-manager's Secret, mounted in a pod
            secret_name = volumes["tls"]["secret"]["secretName"]
            secret = wait_for(
                lambda: self._secret(secret_name), 30, f"Secret {secret_name} with tls.crt/tls.key"
            )
            cert = self.workdir / "tls.crt"
            key = self.workdir / "tls.key"
            cert.write_bytes(base64.b64decode(secret["tls.crt"]))
            key.write_bytes(base64.b64decode(secret["tls.key"]))
            key.chmod(0o600)
            files = [f"--tls-cert-file={cert}", f"--tls-key-file={key}"]
        kubeconfig = service_account_kubeconfig(
            self.cluster,
            self.namespace,
            pod_spec["serviceAccountName"],
            self.workdir / "injector.kubeconfig",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRELMICRO_")}
        for item in self.container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            elif (
                item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                == "metadata.namespace"
            ):
                env[item["name"]] = self.namespace
            elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[item["name"]] = f"{self.deployment}-local"
        argv = [
            str(BIN / "grelmicro-sidecar"),
            *self.container.get("args", []),
            # Where this process listens and finds its files; everything else comes from the chart.
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--health-port={self.health_port}",
            *files,
            f"--kubeconfig={kubeconfig}",
            "--drain-delay=0",
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while http_status(f"http://127.0.0.1:{self.health_port}/healthz") != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the local injector did not become healthy:\n{self.log()}")
            time.sleep(0.1)
        return self

    def _secret(self, name: str) -> dict[str, str] | None:
        found = self.cluster.kubectl(
            "get", "secret", name, "-n", self.namespace, "-o", "json", check=False
        )
        if found.returncode != 0:
            return None
        data = json.loads(found.stdout).get("data") or {}
        return data if "tls.crt" in data and "tls.key" in data else None

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text()
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> LocalInjector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_pod(
    cluster: ControlPlane, namespace: str, pod: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """``kubectl create`` (retrying while the namespace's default ServiceAccount is not there yet)."""
    deadline = time.monotonic() + 30
    while True:
        result = cluster.kubectl(
            "create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(pod), check=False
        )
        if result.returncode == 0 or "serviceaccount" not in result.stderr.lower():
            return result
        if time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def annotated_pod(
    name: str, annotations: dict[str, str] | None = None, inject: bool = True
) -> dict[str, Any]:
    notes = {"leader-election.grelmicro.io/inject": "true"} if inject else {}
    notes.update(annotations or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": notes},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
    }


def sidecar_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    inits = pod["spec"].get("initContainers") or []
    return next((c for c in inits if c["name"] == "grelmicro-sidecar"), None)
