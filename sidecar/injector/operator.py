"""The kopf wiring of the injector: the webhook, the health port, the periodic duties.

The only module that builds the injector's parts and starts kopf. kopf runs
the HTTPS webhook server (``server``: its TLS context is kept by
``servingcert``, the injector's own certificate or the mounted files), login
(from the one ``ApiConfig`` the injector's own calls use) and the pod watch of
``--auto-rbac``; ``drain`` takes SIGTERM from kopf. ``POST /inject`` and
``POST /inject-namespace`` are answered by the pure ``review.answer`` (which
says why kopf's admission engine is bypassed), then ``leaseaccess``.

Several replicas are safe (contract §9): admission is stateless, the sweep
runs in every replica (``sweep``), the certificate Secret is written over the
version read, and there is no peering (``standalone``: kopf's would pause all
but one replica; no KopfPeering CRD). The deployer owns the
MutatingWebhookConfiguration (``webhookconfig``), not kopf, whose managed mode
has each replica rewrite it with its own client config at start and strip its
webhooks at exit: a stopping replica would remove the webhook while others
still run. The injector only keeps its webhooks' ``caBundle``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
from aiohttp import web

from ..kit.aio import cancel
from ..kit.logs import Logger
from ..kube.api import KubeApi
from ..kube.config import ApiConfig
from .annotations import INJECT
from .certificates import Wanted
from .drain import Drain
from .leaseaccess import LeaseAccess
from .metrics import InjectorMetrics
from .patch import Decision
from .rbac import Grants
from .review import answer, refused
from .server import WebhookServer, tls_context
from .servingcert import FileCertificate, OwnCertificate, Source, keep
from .settings import InjectorSettings
from .sweep import sweep_every
from .webhookconfig import NAMESPACE_PATH, WEBHOOK_PATH


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
    settings: InjectorSettings,
    log: Logger,
    metrics: InjectorMetrics,
    access: LeaseAccess | None,
    opted_in: bool = False,
) -> Callable[[Any], Awaitable[Any]]:
    """One webhook path: ``review.answer``, then ``access``'s check of a pod it injects;
    timed and counted by outcome; a denial logged."""

    async def admit(review: Any) -> Any:
        started, outcome = time.perf_counter(), "error"
        try:
            response, decision = answer(
                review, settings.sidecar, settings.excluded_namespaces, opted_in
            )
            if decision is None:
                outcome = "skipped" if response["response"]["allowed"] else "error"
                return response
            outcome, request, chosen = decision.outcome, review["request"], decision.settings
            namespace = request.get("namespace")
            meta = request["object"].get("metadata") or {}
            if outcome == "injected" and access is not None and namespace:
                account = (request["object"].get("spec") or {}).get("serviceAccountName")
                message = await access.missing(namespace, account or "default")
                if message:
                    outcome = "denied"
                    response = refused(str(request.get("uid", "")), message, reason="Forbidden")
                    decision = Decision("denied", message=message, settings=chosen)
            if outcome == "denied":
                pod = meta.get("name") or meta.get("generateName")
                log.info("denied a pod", namespace=namespace, pod=pod, reason=decision.message)
            elif chosen is not None:
                log.debug(
                    "admitted a pod",
                    outcome=outcome,
                    namespace=namespace,
                    election=chosen.election,
                    election_source=chosen.election_source,
                    opted_in_by_namespace=opted_in,
                )
            return response
        finally:
            metrics.observe(outcome, time.perf_counter() - started)

    return admit


async def _health_server(
    settings: InjectorSettings,
    metrics: InjectorMetrics,
    ready: Callable[[], str | None],
) -> web.AppRunner:
    """``/healthz``: 200, or 503 with ``ready()``'s reason (starting, draining)."""

    async def healthz(_: web.Request) -> web.Response:
        reason = ready()
        if reason is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=reason + "\n")

    async def render(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/metrics", render)])
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.health_port).start()
    return runner


def certificate_source(
    settings: InjectorSettings, config: ApiConfig, context: Any, log: Logger
) -> Source:
    """The injector's own certificate (``--tls-secret``), else the mounted files."""
    if settings.tls_secret is None:
        return FileCertificate(settings.tls_cert_file, settings.tls_key_file, context, log)
    wanted = Wanted.of(settings.cert_hosts, settings.ca_validity, settings.cert_validity)
    namespace, secret = settings.tls_secret
    return OwnCertificate(
        KubeApi(config), namespace, secret, settings.webhook_config, wanted, context, log
    )


async def serve(settings: InjectorSettings, config: ApiConfig, log: Logger) -> int:
    # kopf logs every handler run at INFO: one line per pod creation is noise.
    log.capture_libraries("debug" if settings.log_level == "debug" else "warning")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    metrics, serving, stop = InjectorMetrics(), asyncio.Event(), asyncio.Event()
    access = None
    if settings.check_lease_access and not settings.auto_rbac:
        access = LeaseAccess(KubeApi(config), settings.lease_cluster_role, log)  # its own timeout
    context = tls_context()
    routes = {
        path.strip("/"): admission(settings, log, metrics, access, opted_in=path == NAMESPACE_PATH)
        for path in (WEBHOOK_PATH, NAMESPACE_PATH)
    }
    server = WebhookServer(routes, context, host=settings.host, port=settings.port, serving=serving)
    drain = Drain(settings.drain_delay, server, stop, log)
    drain.install()  # until kopf starts: a SIGTERM while the certificate loads stops at once

    def not_ready() -> str | None:
        if drain.draining:
            return "draining: the pod is stopping"
        return None if serving.is_set() else "starting: the webhook is not serving yet"

    kopf_settings = kopf.OperatorSettings()
    kopf_settings.admission.server = server
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

    runner = await _health_server(settings, metrics, not_ready)
    loaded = asyncio.Event()
    duties = [
        asyncio.create_task(
            keep(certificate_source(settings, config, context, log), log, loaded), name="cert"
        )
    ]
    if settings.sweep_interval > 0:
        job = sweep_every(settings.sweep_interval, config, settings.sweep_margin, log, metrics)
        duties.append(asyncio.create_task(job, name="sweep"))
    log.info(
        "injector starting",
        webhook=f"https://{settings.host}:{settings.port}{WEBHOOK_PATH}",
        health=f"http://{settings.host}:{settings.health_port}/healthz",
        image=settings.sidecar.image,
        excluded_namespaces=list(settings.excluded_namespaces),
        sweep_interval=settings.sweep_interval,
        auto_rbac=settings.auto_rbac,
        certificate=(
            "/".join(settings.tls_secret) if settings.tls_secret else str(settings.tls_cert_file)
        ),
        drain_seconds=settings.drain_delay,
    )
    # Not kopf's default identity, from getpass.getuser(): it fails for our UID (contract §8).
    identity: Any = os.environ.get("POD_ID") or "grelmicro-sidecar-injector@" + socket.gethostname()
    try:
        waits = [asyncio.create_task(loaded.wait()), asyncio.create_task(stop.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        await cancel(waits, 1, log)
        if loaded.is_set() and not stop.is_set():
            ignored = asyncio.all_tasks()
            tasks = await kopf.spawn_tasks(
                registry=registry,
                settings=kopf_settings,
                clusterwide=True,
                standalone=True,
                identity=identity,
                stop_flag=stop,
            )
            drain.install()  # over kopf's own handlers, which stop at once
            await kopf.run_tasks(tasks, ignored=ignored)
    finally:
        await cancel(duties, 5, log)
        await runner.cleanup()
        log.info("injector stopped")
    return 0
