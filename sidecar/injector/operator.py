"""The kopf wiring of the injector: the webhook, the health port, the periodic duties.

The only module that imports kopf. kopf runs the HTTPS webhook server (TLS
from the mounted files, re-read when they change), login (from the one
``ApiConfig`` the injector's own calls use), signal handling, and the pod
watch of ``--auto-rbac``. ``POST /inject`` is answered by the pure
``review.answer`` (which says why kopf's admission engine is bypassed).

Several replicas are safe (contract §9): admission is stateless, the sweep
runs in every replica (``sweep``), and there is no peering (``standalone``:
kopf's would pause all but one replica; no KopfPeering CRD). The deployer owns
the MutatingWebhookConfiguration (``webhookconfig``), not kopf, whose managed
mode has each replica rewrite it with its own client config at start and strip
its webhooks at exit: a stopping replica would remove the webhook while others
still run, and replicas would overwrite each other's ``caBundle``. So the
injector needs no RBAC on webhook configurations either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import kopf
from aiohttp import web

from ..kit.aio import cancel
from ..kit.logs import Logger
from ..kube.api import KubeApi
from ..kube.config import ApiConfig
from .annotations import INJECT
from .metrics import InjectorMetrics
from .rbac import Grants
from .review import answer
from .settings import InjectorSettings
from .sweep import sweep_every
from .webhookconfig import WEBHOOK_PATH

HANDLER_ID = WEBHOOK_PATH.strip("/")  # kopf's server passes the path after "/" as the webhook id


def connection_info(config: ApiConfig) -> Any:
    """The injector's one connection (``kube.config.load``) as kopf's login wants it.

    Not kopf's ``login_with_service_account``: it dials ``kubernetes.default.svc``,
    which only cluster DNS resolves, so an injector started before CoreDNS could
    not log in. kopf logs in again after a 401, and the token is read anew then.
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


def admission(
    settings: InjectorSettings, log: Logger, metrics: InjectorMetrics
) -> Callable[[Any], Any]:
    """``POST /inject``: ``review.answer``, timed and counted by outcome; a denial logged."""

    def admit(review: Any) -> Any:
        started, outcome = time.perf_counter(), "error"
        try:
            response, decision = answer(review, settings.sidecar, settings.excluded_namespaces)
            if decision is None:
                outcome = "skipped" if response["response"]["allowed"] else "error"
                return response
            outcome, request, chosen = decision.outcome, review["request"], decision.settings
            namespace = request.get("namespace")
            if outcome == "denied":
                meta = request["object"].get("metadata") or {}
                pod = meta.get("name") or meta.get("generateName")
                log.info("denied a pod", namespace=namespace, pod=pod, reason=decision.message)
            elif chosen is not None:
                log.debug(
                    "admitted a pod",
                    outcome=outcome,
                    namespace=namespace,
                    election=chosen.election,
                    election_source=chosen.election_source,
                )
            return response
        finally:
            metrics.observe(outcome, time.perf_counter() - started)

    return admit


class _WebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server, ``POST /inject`` answered by ``admit``; ``ready`` once it serves.
    Any other path goes to kopf's own engine, which has no handlers (404)."""

    def __init__(self, admit: Callable[[Any], Any], ready: asyncio.Event, **kwargs: Any):
        super().__init__(**kwargs)
        self.admit, self.ready = admit, ready

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async def route(request: Any, *, webhook: Any = None, **kwargs: Any) -> Any:
            if webhook == HANDLER_ID:
                return self.admit(request)
            return await fn(request, webhook=webhook, **kwargs)

        async for client_config in super().__call__(route):
            self.ready.set()
            yield client_config


async def _health_server(
    settings: InjectorSettings, metrics: InjectorMetrics, ready: asyncio.Event
) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        if ready.is_set():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="starting: the webhook is not serving yet\n")

    async def render(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/metrics", render)])
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.health_port).start()
    return runner


async def serve(settings: InjectorSettings, config: ApiConfig, log: Logger) -> int:
    # kopf logs every handler run at INFO: one line per pod creation is noise.
    log.capture_libraries("debug" if settings.log_level == "debug" else "warning")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    metrics, ready = InjectorMetrics(), asyncio.Event()
    # TLS ≥ 1.2, no TLS 1.3 session tickets: the API server's webhook client keeps no session
    # cache, so a ticket is handshake work for nothing. kopf loads the files into it (on change).
    tls = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    tls.minimum_version, tls.num_tickets = ssl.TLSVersion.TLSv1_2, 0
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.admission.server = _WebhookServer(
        admission(settings, log, metrics),
        ready,
        addr=settings.host,
        port=settings.port,
        certfile=str(settings.tls_cert_file),
        pkeyfile=str(settings.tls_key_file),
        context=tls,
    )
    kopf_settings.admission.managed = None  # the deployer owns the configuration (docstring)
    kopf_settings.peering.standalone = True
    kopf_settings.scanning.disabled = True  # no CRD/namespace watches: less RBAC, less load
    kopf_settings.posting.enabled = False  # no Events on pods for each admission
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
    # Not kopf's default identity, from getpass.getuser(): it fails for our UID (contract §8).
    identity: Any = os.environ.get("POD_ID") or "grelmicro-sidecar-injector@" + socket.gethostname()
    try:
        await kopf.operator(
            registry=registry,
            settings=kopf_settings,
            clusterwide=True,
            standalone=True,
            identity=identity,
        )
    finally:
        await cancel(sweeps, 5, log)
        await runner.cleanup()
        log.info("injector stopped")
    return 0
