"""The kopf wiring of the injector: the webhook, the health port, the periodic duties.

The only module that imports kopf. kopf runs the operator: the HTTPS webhook
server (TLS from files, reloaded when they change), login (from the one
``ApiConfig`` the injector's own calls use), signal handling, and the pod
watch of ``--auto-rbac``. ``POST /inject`` is answered by the pure
``review.answer`` (which says why kopf's admission engine is bypassed there);
this module only routes, times and counts.

Several replicas are safe, by design:

- **The MutatingWebhookConfiguration is owned by the deployer** (the Helm
  chart, built from ``webhookconfig``), not by kopf:
  ``settings.admission.managed`` stays off. kopf's managed mode is written for
  one operator: each replica would rewrite the whole configuration with *its
  own* client config on start-up and strip its webhooks on exit, so during a
  rolling update a stopping replica removes the webhook while the others still
  run, and replicas with different (self-signed) certificates overwrite each
  other's ``caBundle``. With a deployer-owned object all replicas are
  interchangeable endpoints behind one Service with one certificate, and the
  injector needs no RBAC on webhook configurations at all.
- **No peering** (``standalone``): kopf's peering pauses all but one replica,
  which is meant for watch handlers; every replica must answer admission
  requests, and the injector needs no KopfPeering CRD.
- **The sweep runs in every replica**: each delete carries the judged
  ``resourceVersion``, so two replicas sweeping at once cost a 404/409, never a
  wrong delete.
- **Admission is stateless**: the decision depends only on the request.

The serving certificate is read from files (a mounted Secret); kopf's
``WebhookServer`` re-reads them when they change, so a rotated certificate
is picked up without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import kopf

from ..kit.logs import Logger
from ..kube.api import KubeApi
from ..kube.config import ApiConfig
from . import rbac
from .annotations import INJECT, LABEL_LEADER
from .metrics import InjectorMetrics
from .review import answer
from .settings import InjectorSettings
from .sweep import every, sweeper
from .webhookconfig import WEBHOOK_PATH

HANDLER_ID = WEBHOOK_PATH.strip("/")  # kopf's server passes the path after "/" as the webhook id


def connection_info(config: ApiConfig) -> Any:
    """The injector's one connection (``kube.config.load``) as kopf's login wants it.

    The same server, CA, client certificate and token as the injector's own
    calls; in a pod, the address the kubelet gives in ``KUBERNETES_SERVICE_HOST``
    (kopf's ``login_with_service_account`` dials ``kubernetes.default.svc``, a
    name only cluster DNS resolves, so an injector started before CoreDNS
    answers could not log in). kopf calls login again after a 401: the token is
    read anew (a rotated token file; a plugin's expired token is renewed).
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
    """The name kopf gives this operator: the pod's name (its hostname).

    kopf's default derives it from ``getpass.getuser()``, which raises for a UID
    with no passwd entry -- the chart runs the image as 65532, which has none --
    and so crashed the injector at start in every pod. ``POD_ID`` (kopf's own
    override) still wins when set.
    """
    return os.environ.get("POD_ID") or f"grelmicro-sidecar-injector@{socket.gethostname()}"


def _configure_logging(log: Logger, level: str) -> None:
    # kopf logs every handler run at INFO: one line per pod creation is noise.
    log.capture_libraries("debug" if level == "debug" else "warning")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class _InjectorWebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server; ``POST /inject`` is answered by ``review.answer``, timed.

    kopf's server gives TLS from the mounted files and reloads them when they
    change; any other path goes to kopf's own engine (which has no handlers,
    so 404). See ``review`` for why the engine is not on the injection path.
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

    def _admit(self, request: Any) -> Any:
        started = time.perf_counter()
        outcome = "error"
        try:
            response, decision = answer(
                request, self.injector.sidecar, self.injector.excluded_namespaces
            )
            outcome = (
                decision.outcome
                if decision is not None
                else ("skipped" if response["response"]["allowed"] else "error")
            )
            if decision is not None and decision.outcome == "denied":
                meta = (request.get("request") or {}).get("object", {}).get("metadata") or {}
                self.log.info(
                    "denied a pod",
                    namespace=(request.get("request") or {}).get("namespace"),
                    pod=meta.get("name") or meta.get("generateName"),
                    reason=decision.message,
                )
            elif decision is not None and decision.settings is not None:
                self.log.debug(
                    "admitted a pod",
                    outcome=decision.outcome,
                    namespace=(request.get("request") or {}).get("namespace"),
                    election=decision.settings.election,
                    election_source=decision.settings.election_source,
                )
            return response
        finally:
            self.metrics.observe(outcome, time.perf_counter() - started)

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
        grants = rbac.Grants(KubeApi(config), log, metrics)

        @kopf.on.event("v1", "pods", annotations={INJECT: "true"}, registry=registry)
        async def grant(body: Any, type: str | None = None, **_: Any) -> None:
            if type == "DELETED":
                return
            meta = body.get("metadata", {})
            namespace = meta.get("namespace")
            account = body.get("spec", {}).get("serviceAccountName") or "default"
            if not namespace or namespace in settings.excluded_namespaces:
                return
            await grants.ensure(namespace, account, "leases")
            if (meta.get("annotations") or {}).get(LABEL_LEADER) == "true":
                await grants.ensure(namespace, account, "leader-label")

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
    site = aiohttp.web.TCPSite(runner, settings.host, settings.health_port)
    await site.start()
    return runner


async def serve(settings: InjectorSettings, config: ApiConfig, log: Logger) -> int:
    _configure_logging(log, settings.log_level)
    metrics = InjectorMetrics()
    ready = asyncio.Event()
    stop = asyncio.Event()

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
    tasks = []
    if settings.sweep_interval > 0:
        tasks.append(
            asyncio.create_task(
                every(
                    settings.sweep_interval,
                    sweeper(config, settings.sweep_margin, log, metrics),
                    stop,
                )
            )
        )
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
        stop.set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await runner.cleanup()
        log.info("injector stopped")
    return 0
