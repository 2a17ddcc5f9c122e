"""Admission latency of the injector at 50 concurrent pod creations (target p99 ≤ 20 ms).

``measure(kubeconfig)`` starts a real ``grelmicro-sidecar injector`` serving
TLS on 127.0.0.1, registers it (``webhookconfig``, narrowed to a throwaway
namespace), and reports three sets of numbers, all in milliseconds:

- ``webhook``: the admission round trip as the API server makes it: an
  AdmissionReview v1 POSTed over TLS with keep-alive connections, ``concurrency``
  in flight at once, timed from send to decoded answer. This is the latency the
  API server adds to a pod creation by calling the injector; ``p50_ms`` and
  ``p99_ms`` at the top level are these.
- ``create_injected``: pod CREATEs through the real API server, ``concurrency``
  at once, with the annotation (the API server calls the webhook);
- ``create_plain``: the same without the annotation (the webhook is not called),
  the baseline on this machine;
- ``apiserver_webhook_calls``: the API server's own histogram of its calls to
  the webhook during ``create_injected`` (mean, and the share under each of its
  coarse bucket bounds), and ``injector_handler_mean_ms``, the injector's time
  per request from its ``/metrics``.

Reading them: with warm keep-alive connections the round trip is queueing
behind ~0.1-0.2 ms of work per request. The API server's webhook client keeps
only part of its connections idle between bursts, so at 50 concurrent
creations many calls pay a fresh TLS handshake (~2.5 ms each here, client and
server on the same two cores), which dominates what the API server observes.
An injected pod is also called twice (``reinvocationPolicy: IfNeeded``: the
API server's own plugins change the pod after the first call).

Everything runs on loopback; requests are bounded in count and the function
cleans up (configuration, namespace, process) whatever happens.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.injector.rbac import role, role_binding
from sidecar.injector.webhookconfig import (
    NAME_LABEL,
    WEBHOOK_NAME,
    ca_bundle_of,
    webhook_configuration,
)
from sidecar.kube.config import ApiConfig, load
from tests.cluster import free_port
from tests.cluster.pki import CertificateAuthority

INJECT = "leader-election.grelmicro.io/inject"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[index], 2)


def _summary(samples: list[float]) -> dict[str, Any]:
    return {
        "count": len(samples),
        "p50_ms": _pct(samples, 50),
        "p90_ms": _pct(samples, 90),
        "p99_ms": _pct(samples, 99),
        "max_ms": round(max(samples), 2),
        "mean_ms": round(statistics.fmean(samples), 2),
    }


def _pod(name: str, annotated: bool, namespace: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": "bench"}}
    if annotated:
        meta["annotations"] = {INJECT: "true", "leader-election.grelmicro.io/name": "bench"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
        },
    }


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    """An AdmissionReview v1 as the API server sends it for a Pod CREATE."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"],
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


async def _run(concurrency: int, total: int, one: Callable[[int], Awaitable[float]]) -> list[float]:
    samples: list[float] = []
    queue = iter(range(total))

    async def worker() -> None:
        for i in queue:
            samples.append(await one(i))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples


class _Api:
    def __init__(self, config: ApiConfig, concurrency: int):
        self.config = config
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=config.ssl_context, limit=concurrency),
            headers={"Authorization": config.authorization() or ""}
            if config.authorization()
            else {},
        )

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, self.config.server + path, json=body) as resp:
            data = await resp.json(content_type=None)
            return resp.status, data

    async def text(self, path: str) -> str:
        async with self.session.get(self.config.server + path) as resp:
            return await resp.text()

    async def close(self) -> None:
        await self.session.close()


APISERVER_HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"


async def _webhook_histogram(api: _Api, webhook: str) -> dict[str, float]:
    """The API server's own record of its calls to ``webhook``: cumulative buckets, sum, count."""
    out: dict[str, float] = {}
    for line in (await api.text("/metrics")).splitlines():
        if not line.startswith(APISERVER_HISTOGRAM) or f'name="{webhook}"' not in line:
            continue
        name, value = line.rsplit(" ", 1)
        if "_bucket" in name:
            key = name.split('le="', 1)[1].split('"', 1)[0]
        else:
            key = name.split("{", 1)[0].rsplit("_", 1)[1]  # sum / count
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _histogram_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Calls in the window, their mean, and the share within each bucket bound (coarse)."""
    count = after.get("count", 0) - before.get("count", 0)
    if not count:
        return {"calls": 0}
    total = after.get("sum", 0) - before.get("sum", 0)
    bounds = sorted((k for k in after if k not in ("sum", "count", "+Inf")), key=float)
    within = {
        f"le_{float(b) * 1000:g}ms": round((after[b] - before.get(b, 0)) / count, 3)
        for b in bounds
        if float(b) <= 0.1
    }
    return {"calls": int(count), "mean_ms": round(1000 * total / count, 2), "share": within}


async def _measure(
    kubeconfig: Path, concurrency: int, pods: int, reviews: int, workdir: Path
) -> dict[str, Any]:
    config = load(str(kubeconfig))
    ca = CertificateAuthority.create("grelmicro-bench-injector-ca")
    cert, key = ca.issue("injector", ips=("127.0.0.1",), server=True)
    (workdir / "tls.crt").write_bytes(cert)
    (workdir / "tls.key").write_bytes(key)
    port, health = free_port(), free_port()
    log = open(workdir / "injector.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar.commands.cli",
            "injector",
            f"--kubeconfig={kubeconfig}",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--health-port={health}",
            f"--tls-cert-file={workdir / 'tls.crt'}",
            f"--tls-key-file={workdir / 'tls.key'}",
            "--sidecar-image=registry.example/grelmicro-sidecar:bench",
            "--sweep-interval=0",
            "--log-level=warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    namespace = f"bench-inj-{uuid.uuid4().hex[:8]}"
    config_name = f"grelmicro-sidecar-injector-{namespace}"
    api = _Api(config, concurrency)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"injector exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("injector not healthy within 60s") from None
                await asyncio.sleep(0.1)

        await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        # The Lease grant a user gives (manifests/rbac.yaml's rules), so the injector's check
        # of it (leaseaccess: a SubjectAccessReview per verb, once per account) is measured.
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        await api.request("POST", f"{rbac}/roles", role(namespace))
        await api.request("POST", f"{rbac}/rolebindings", role_binding(namespace, "default"))
        hook = webhook_configuration(
            ca_bundle_of(ca.cert_pem),
            url=f"https://127.0.0.1:{port}/inject",
            excluded_namespaces=["kube-system"],
            name=config_name,
        )
        for webhook in hook["webhooks"]:
            webhook["namespaceSelector"]["matchExpressions"].append(
                {"key": NAME_LABEL, "operator": "In", "values": [namespace]}
            )
        status, body = await api.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", hook
        )
        if status >= 300:
            raise RuntimeError(f"cannot register the webhook: {body}")
        # Live once a dry-run create comes back injected (also waits for the default SA).
        deadline = time.monotonic() + 60
        pods_path = f"/api/v1/namespaces/{namespace}/pods"
        while True:
            status, body = await api.request(
                "POST", pods_path + "?dryRun=All", _pod("probe", True, namespace)
            )
            if status == 201 and (body.get("spec") or {}).get("initContainers"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"webhook not live within 60s: {status} {body}")
            await asyncio.sleep(0.1)

        # 1. The webhook round trip, as the API server makes it.
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        hook_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
        )
        url = f"https://127.0.0.1:{port}/inject?timeout=10s"
        bodies = [
            json.dumps(_review(_pod(f"r-{i}", True, namespace))).encode() for i in range(reviews)
        ]

        async def review(i: int) -> float:
            started = time.perf_counter()
            async with hook_session.post(
                url, data=bodies[i], headers={"Content-Type": "application/json"}
            ) as resp:
                answer = await resp.json()
            elapsed = (time.perf_counter() - started) * 1000
            patch = json.loads(base64.b64decode(answer["response"]["patch"]))
            assert answer["response"]["allowed"] and patch, answer
            return elapsed

        try:
            await _run(concurrency, concurrency, review)  # warm the connection pool
            webhook = await _run(concurrency, reviews, review)
        finally:
            await hook_session.close()

        # 2./3. Pod creations through the API server, with and without the webhook.
        async def create(annotated: bool) -> Callable[[int], Awaitable[float]]:
            prefix = "inj" if annotated else "plain"

            async def one(i: int) -> float:
                started = time.perf_counter()
                status, body = await api.request(
                    "POST", pods_path, _pod(f"{prefix}-{i}", annotated, namespace)
                )
                elapsed = (time.perf_counter() - started) * 1000
                if status != 201:
                    raise RuntimeError(f"create failed: {status} {body}")
                injected = bool((body.get("spec") or {}).get("initContainers"))
                if injected != annotated:
                    raise RuntimeError(f"pod {prefix}-{i}: injected={injected}")
                return elapsed

            return one

        plain = await _run(concurrency, pods, await create(False))
        seen_before = await _webhook_histogram(api, WEBHOOK_NAME)
        injected = await _run(concurrency, pods, await create(True))
        seen_after = await _webhook_histogram(api, WEBHOOK_NAME)
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        server_sum = server_count = 0.0
        for line in metrics.splitlines():
            if line.startswith("grelmicro_injector_admission_duration_seconds_sum"):
                server_sum = float(line.split()[-1])
            if line.startswith("grelmicro_injector_admission_duration_seconds_count"):
                server_count = float(line.split()[-1])
        hook_summary = _summary(webhook)
        return {
            "concurrency": concurrency,
            "count": hook_summary["count"],
            "p50_ms": hook_summary["p50_ms"],
            "p99_ms": hook_summary["p99_ms"],
            "target_p99_ms": 20.0,
            "webhook": hook_summary,
            "create_injected": _summary(injected),
            "create_plain": _summary(plain),
            "apiserver_webhook_calls": _histogram_summary(seen_before, seen_after),
            "injector_handler_mean_ms": round(1000 * server_sum / server_count, 3)
            if server_count
            else None,
        }
    finally:
        await api.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{config_name}",
        )
        await api.request("DELETE", f"/api/v1/namespaces/{namespace}")
        await api.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def measure(
    kubeconfig: Path, concurrency: int = 50, pods: int = 200, reviews: int = 1000
) -> dict[str, Any]:
    """Run the measurement against the cluster of ``kubeconfig`` (admin); see the module doc."""
    with tempfile.TemporaryDirectory(prefix="grelmicro-bench-injector-") as tmp:
        return asyncio.run(_measure(Path(kubeconfig), concurrency, pods, reviews, Path(tmp)))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kubeconfig", type=Path, help="admin kubeconfig of a running cluster")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--reviews", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.kubeconfig is None:
        # No cluster given: start the test control plane for this run only.
        from tests.cluster import ControlPlane

        with tempfile.TemporaryDirectory(prefix="grelmicro-bench-cluster-") as tmp:
            plane = ControlPlane(Path(tmp))
            plane.start()
            try:
                result = measure(plane.kubeconfig, args.concurrency, args.pods, args.reviews)
            finally:
                plane.stop()
    else:
        result = measure(args.kubeconfig, args.concurrency, args.pods, args.reviews)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
