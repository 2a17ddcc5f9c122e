"""Keeps the webhook's serving certificate: its Secret, the webhook's CA bundle, the TLS context.

Two sources, one job: put a certificate the API server trusts into the
server's TLS context, and keep it there.

- ``OwnCertificate`` (the chart's default): the injector's own CA and
  certificate (``certificates``) in a Secret the chart renders empty. Every
  replica runs the same pass: read the Secret, write what ``plan`` says it must
  hold over the ``resourceVersion`` it read (of two replicas writing at once,
  one wins and the other reads the winner's next pass), make every webhook of
  the configuration trust the bundle, then load the certificate. A bundle an
  upgrade or a hand edit removed is put back on the next pass.
- ``FileCertificate`` (cert-manager, or files given by hand): the PEM files,
  loaded again when they change; the CA bundle is someone else's job.

Guarantee: the context gets a certificate only after the webhook configuration
was seen trusting its CA (when the configuration exists).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from ssl import SSLContext
from typing import Any, Protocol

from ..core import backoff
from ..kit.logs import Logger
from ..kube.api import ADMISSION, CORE, KubeApi, path
from ..kube.errors import ApiError, Conflict, Forbidden, NotFound
from .certificates import Material, Wanted, next_check, plan
from .server import load_pem

#: How often each replica checks the Secret and the bundle when nothing is due sooner.
INTERVAL = 10.0
CERT_RBAC_FIX = (
    "grant the injector's ServiceAccount get and update on its Secret and on the "
    "MutatingWebhookConfiguration (the chart's Role and ClusterRole do)"
)
Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


class OwnCertificate:
    """The injector's own CA and certificate, kept in Secret ``namespace/secret``."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        secret: str,
        webhook_config: str,
        wanted: Wanted,
        context: SSLContext,
        log: Logger,
        clock: Clock = _now,
    ):
        self.api, self.namespace, self.secret = api, namespace, secret
        self.webhook_config, self.wanted, self.context = webhook_config, wanted, context
        self.log, self.clock = log, clock
        self.loaded: bytes | None = None  # the certificate in the context

    @property
    def _secret_url(self) -> str:
        return path(CORE, "secrets", self.namespace, self.secret)

    async def _read(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.api.call("GET", self._secret_url, "get secrets")
        except NotFound:
            return None
        return found

    async def _write(self, secret: dict[str, Any] | None, material: Material) -> None:
        """Over the version read (409 when another replica wrote first); created if absent."""
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": self.namespace},
                "type": "Opaque",
                "data": material.secret_data(),
            }
            url = path(CORE, "secrets", self.namespace)
            await self.api.call("POST", url, "create secrets", body)
        else:
            body = dict(secret, data=material.secret_data())
            await self.api.call("PUT", self._secret_url, "update secrets", body)

    async def _trust(self, bundle: bytes) -> None:
        """Every webhook of the configuration carries ``bundle`` (once the configuration exists).

        Over the version read: another replica setting the same new bundle at the same moment
        (both saw the Secret change) is a 409, read again, most often to find it done."""
        url = path(ADMISSION, "mutatingwebhookconfigurations", name=self.webhook_config)
        what = "mutatingwebhookconfigurations"
        encoded = base64.b64encode(bundle).decode()
        for _ in range(5):
            try:
                config = await self.api.call("GET", url, f"get {what}")
            except NotFound:
                self.log.once(
                    "cert:no-webhook",
                    "warning",
                    "the webhook configuration does not exist; its CA bundle is set once it does",
                    webhook_configuration=self.webhook_config,
                )
                return
            self.log.forget("cert:no-webhook")
            webhooks = config.get("webhooks") or []
            stale = [
                w for w in webhooks if (w.get("clientConfig") or {}).get("caBundle") != encoded
            ]
            if not stale:
                return
            for webhook in stale:
                webhook.setdefault("clientConfig", {})["caBundle"] = encoded
            try:
                await self.api.call("PUT", url, f"update {what}", config)
            except Conflict:
                continue
            self.log.info(
                "set the webhook's CA bundle",
                webhook_configuration=self.webhook_config,
                webhooks=[w.get("name") for w in stale],
            )
            return
        raise ApiError("the webhook configuration changed under every write; trying again")

    async def once(self) -> datetime:
        """One pass (module docstring); returns when the next one is due. Raises ``ApiError``."""
        for _ in range(5):  # another replica's write in between: read it and judge again
            secret = await self._read()
            current = Material.from_secret_data((secret or {}).get("data"))
            now = self.clock()
            wanted = plan(current, self.wanted, now)
            if wanted is None:
                break
            try:
                await self._write(secret, wanted)
            except Conflict:
                continue
            self._log_change(current, wanted)
            current = wanted
            break
        else:
            raise ApiError("the certificate Secret changed under every write; trying again")
        assert current is not None
        await self._trust(current.ca_bundle)
        if current.cert != self.loaded:
            load_pem(self.context, current.cert, current.key)
            self.loaded = current.cert
            self.log.info("serving a new certificate", secret=f"{self.namespace}/{self.secret}")
        return min(next_check(current, self.wanted, now), now + timedelta(seconds=INTERVAL))

    def _log_change(self, before: Material | None, after: Material) -> None:
        what = []
        if before is None or before.ca_key != after.ca_key:
            what.append("a new CA")
        if before is None or before.cert != after.cert:
            what.append("a new serving certificate")
        if before is not None and before.ca_bundle != after.ca_bundle and not what:
            what.append("an ended CA out of the bundle")
        self.log.info("wrote " + " and ".join(what), secret=f"{self.namespace}/{self.secret}")


class FileCertificate:
    """PEM files (cert-manager's Secret, mounted), loaded again when either file changes."""

    def __init__(
        self, cert: Path, key: Path, context: SSLContext, log: Logger, clock: Clock = _now
    ):
        self.cert, self.key, self.context, self.log, self.clock = cert, key, context, log, clock
        self.seen: tuple[float, float] | None = None

    async def once(self) -> datetime:
        stamps = (self.cert.stat().st_mtime, self.key.stat().st_mtime)
        if stamps != self.seen:
            load_pem(self.context, self.cert.read_bytes(), self.key.read_bytes())
            if self.seen is not None:
                self.log.info("serving the certificate files anew", cert_file=str(self.cert))
            self.seen = stamps
        return self.clock() + timedelta(seconds=INTERVAL)


class Source(Protocol):
    """Where the serving certificate comes from: ``once`` loads it when it changed and says
    when to look again."""

    clock: Clock

    async def once(self) -> datetime: ...


async def keep(source: Source, log: Logger, loaded: asyncio.Event) -> None:
    """``source.once`` when it says, until cancelled; ``loaded`` is set after the first success.
    A failure is logged once (until a pass succeeds) and tried again within 1 to 10 s."""
    failures = 0
    while True:
        try:
            due = await source.once()
        except (ApiError, OSError, ValueError) as err:
            fix = {"fix": CERT_RBAC_FIX} if isinstance(err, Forbidden) else {}
            log.once("cert:error", "error", "cannot keep the serving certificate", error=str(err),
                     **fix)  # fmt: skip
            failures += 1
            await asyncio.sleep(backoff.delay(failures, 1.0, 10.0, jitter=(1, 1)))
            continue
        log.forget("cert:error")
        loaded.set()
        failures = 0
        await asyncio.sleep(max(0.05, (due - source.clock()).total_seconds()))
