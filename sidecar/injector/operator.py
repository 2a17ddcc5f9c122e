"""The kopf wiring of the injector: the webhook, the health port, the periodic duties.

The only module that imports kopf. kopf runs the HTTPS webhook server (TLS
from the mounted files, re-read when they change, so a rotated certificate
needs no restart), login (from the one ``ApiConfig`` the injector's own calls
use), signal handling, and the pod watch of ``--auto-rbac``. ``POST /inject``
is answered by the pure ``review.answer`` (which says why kopf's admission
engine is bypassed); this module only routes, times and counts.

Several replicas are safe, by design:

- **The MutatingWebhookConfiguration is owned by the deployer** (the chart,
  built from ``webhookconfig``), not by kopf (``admission.managed`` stays off).
  kopf's managed mode is written for one operator: each replica would rewrite
  the configuration with its own client config on start-up and strip its
  webhooks on exit, so a stopping replica would remove the webhook while the
  others still run, and replicas with different certificates would overwrite
  each other's ``caBundle``. Deployer-owned, the replicas are interchangeable
  endpoints behind one Service, and the injector needs no RBAC on webhook
  configurations.
- **No peering** (``standalone``): kopf's peering pauses all but one replica;
  every replica must answer admission requests, and no KopfPeering CRD is needed.
- **Admission is stateless**, and the sweep runs in every replica (see ``sweep``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp.web
import kopf

from ..kit.aio import cancel
from ..kit.logs import Logger
from ..kube.api import KubeApi
from ..kube.config import ApiConfig
from .annotations import INJECT
from .metrics import InjectorMetrics
from .patch import Decision
from .rbac import Grants
from .review import answer
from .settings import InjectorSettings
from .sweep import sweep_every
from .webhookconfig import WEBHOOK_PATH

HANDLER_ID = WEBHOOK_PATH.strip("/")  # kopf's server passes the path after "/" as the webhook id


def connection_info(config: ApiConfig) -> Any:
    """The injector's one connection (``kube.config.load``) as kopf's login wants it.

    In a pod, the address the kubelet gives in ``KUBERNETES_SERVICE_HOST``:
    kopf's ``login_with_service_account`` dials ``kubernetes.default.svc``, a
    name only cluster DNS resolves, so an injector started before CoreDNS
    answers could not log in. kopf logs in again after a 401, and the token is
    read anew then (a rotated token file; a plugin's expired token renewed).
    """
    tls = config.tls_files
    return kopf.ConnectionInfo(
        server=config.server,
        ca_path=tls.ca_path,
        ca_data=tls.ca_data,
        token=(config.authorization(force_reload=True) or "").removeprefix("Bearer ") or None,
        certificate_path=tls.cert_path,
        certificate_data=tls.cert_data,
        private_key_path=tls.key_path,
        private_key_data=tls.key_data,
        default_namespace=config.namespace,
    )


def own_identity() -> Any:
    """kopf's operator identity: ``POD_ID``, else the hostname (contract §8: kopf's
    default calls ``getpass.getuser()``, which fails for the image's UID)."""
    return os.environ.get("POD_ID") or f"grelmicro-sidecar-injector@{socket.gethostname()}"


class _InjectorWebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server; ``POST /inject`` is answered by ``review.answer``, timed.

    Any other path goes to kopf's own engine, which has no handlers (404).
    """

    def __init__(
        self,
        settings: InjectorSettings,
        log: Logger,
        metrics: InjectorMetrics,
        ready: asyncio.Event,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.injector = settings
        self.log = log
        self.metrics = metrics
        self.ready = ready

    def _admit(self, review: Any) -> Any:
        started, outcome = time.perf_counter(), "error"
        try:
            response, decision = answer(
                review, self.injector.sidecar, self.injector.excluded_namespaces
            )
            if decision is None:
                outcome = "skipped" if response["response"]["allowed"] else "error"
            else:
                outcome = decision.outcome
                self._log(review["request"], decision)
            return response
        finally:
            self.metrics.observe(outcome, time.perf_counter() - started)

    def _log(self, request: Mapping[str, Any], decision: Decision) -> None:
        namespace = request.get("namespace")
        if decision.outcome == "denied":
            meta = request["object"].get("metadata") or {}
            pod = meta.get("name") or meta.get("generateName")
            self.log.info("denied a pod", namespace=namespace, pod=pod, reason=decision.message)
        elif decision.settings is not None:
            self.log.debug(
                "admitted a pod",
                outcome=decision.outcome,
                namespace=namespace,
                election=decision.settings.election,
                election_source=decision.settings.election_source,
            )

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async def route(request: Any, *, webhook: Any = None, **kwargs: Any) -> Any:
            if webhook == HANDLER_ID:
                return self._admit(request)
            return await fn(request, webhook=webhook, **kwargs)

        async for client_config in super().__call__(route):
            self.ready.set()
            yield client_config


def build_registry(
    settings: InjectorSettings, config: ApiConfig, log: Logger, metrics: InjectorMetrics
) -> Any:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(id="login", registry=registry)
    def login(**_: Any) -> Any:
        credentials = connection_info(config)
        what = "the service account" if config.in_cluster else "the kubeconfig"
        log.info(f"logged in with {what}", api_server=credentials.server)
        return credentials

    if settings.auto_rbac:
        grants = Grants(KubeApi(config), log, metrics, settings.excluded_namespaces)

        @kopf.on.event("v1", "pods", annotations={INJECT: "true"}, registry=registry)
        async def grant(body: Any, type: str | None = None, **_: Any) -> None:
            await grants.on_pod(body, type)

    return registry


def _server_tls() -> ssl.SSLContext:
    """TLS ≥ 1.2, and no TLS 1.3 session tickets.

    The API server's webhook client keeps no TLS session cache, so tickets are
    never used, and it opens a fresh connection for many calls in a burst:
    each ticket is work on the hot path of a handshake for nothing.
    kopf loads the certificate files into this context (and again when they change).
    """
    context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.num_tickets = 0
    return context


async def _health_server(
    settings: InjectorSettings, metrics: InjectorMetrics, ready: asyncio.Event
) -> aiohttp.web.AppRunner:
    async def healthz(_: aiohttp.web.Request) -> aiohttp.web.Response:
        if ready.is_set():
            return aiohttp.web.Response(text="ok\n")
        return aiohttp.web.Response(status=503, text="starting: the webhook is not serving yet\n")

    async def render(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.Response(
            text=metrics.render(), content_type="text/plain", charset="utf-8"
        )

    app = aiohttp.web.Application()
    app.add_routes([aiohttp.web.get("/healthz", healthz), aiohttp.web.get("/metrics", render)])
    runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, settings.host, settings.health_port).start()
    return runner


async def serve(settings: InjectorSettings, config: ApiConfig, log: Logger) -> int:
    # kopf logs every handler run at INFO: one line per pod creation is noise.
    log.capture_libraries("debug" if settings.log_level == "debug" else "warning")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    metrics = InjectorMetrics()
    ready = asyncio.Event()

    kopf_settings = kopf.OperatorSettings()
    kopf_settings.admission.server = _InjectorWebhookServer(
        settings,
        log,
        metrics,
        ready,
        addr=settings.host,
        port=settings.port,
        certfile=str(settings.tls_cert_file),
        pkeyfile=str(settings.tls_key_file),
        context=_server_tls(),
    )
    kopf_settings.admission.managed = None  # the deployer owns the configuration (docstring)
    kopf_settings.peering.standalone = True
    kopf_settings.scanning.disabled = True  # no CRD/namespace watches: less RBAC, less load
    kopf_settings.posting.enabled = False  # no Events on pods for each admission
    registry = build_registry(settings, config, log, metrics)

    runner = await _health_server(settings, metrics, ready)
    sweeps = []
    if settings.sweep_interval > 0:
        job = sweep_every(settings.sweep_interval, config, settings.sweep_margin, log, metrics)
        sweeps.append(asyncio.create_task(job, name="sweep"))
    log.info(
        "injector starting",
        webhook=f"https://{settings.host}:{settings.port}{WEBHOOK_PATH}",
        health=f"http://{settings.host}:{settings.health_port}/healthz",
        image=settings.sidecar.image,
        excluded_namespaces=list(settings.excluded_namespaces),
        sweep_interval=settings.sweep_interval,
        auto_rbac=settings.auto_rbac,
    )
    try:
        await kopf.operator(
            registry=registry,
            settings=kopf_settings,
            clusterwide=True,
            standalone=True,
            identity=own_identity(),
        )
    finally:
        await cancel(sweeps, 5, log)
        await runner.cleanup()
        log.info("injector stopped")
    return 0
