"""``servingcert.OwnCertificate``'s pass against a stub API server: what it writes, and a race.

Pure logic over a stub (the real API server and two injectors sharing one Secret:
tests/ship/test_chart_cluster.py).
"""

from __future__ import annotations

import asyncio
import base64
import copy
from datetime import UTC, datetime
from typing import Any

from sidecar.injector.certificates import Material, Wanted
from sidecar.injector.server import tls_context
from sidecar.injector.servingcert import OwnCertificate
from sidecar.kit.logs import Logger
from sidecar.kube.errors import Conflict

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Stub:
    """A Secret and a webhook configuration of two webhooks, behind ``call``. ``race``: the
    next PUT of the configuration meets another replica's, which set the same bundle first."""

    def __init__(self) -> None:
        self.secret: dict[str, Any] = {"metadata": {"name": "tls", "resourceVersion": "1"}}
        self.config: dict[str, Any] = {"webhooks": [{"name": "a"}, {"name": "b"}]}
        self.race = False
        self.puts: list[str] = []

    async def call(self, method: str, url: str, what: str, body: Any = None) -> Any:
        kind = "secret" if "/secrets/" in url else "config"
        if method == "GET":
            return copy.deepcopy(self.secret if kind == "secret" else self.config)
        self.puts.append(kind)
        if kind == "secret":
            self.secret = body
        elif self.race:
            self.race = False
            self.config = copy.deepcopy(body)  # the other replica's write: the same bundle
            raise Conflict("update mutatingwebhookconfigurations: HTTP 409", status=409)
        else:
            self.config = body
        return body


def test_a_first_pass_writes_the_secret_then_the_bundle_then_serves() -> None:
    stub = Stub()
    cert = OwnCertificate(stub, "ns", "tls", "hook", Wanted(("svc.ns.svc",)), tls_context(),  # type: ignore[arg-type]
                          Logger("error"), clock=lambda: NOW)  # fmt: skip
    asyncio.run(cert.once())
    material = Material.from_secret_data(stub.secret["data"])
    assert material is not None and cert.loaded == material.cert
    bundle = base64.b64encode(material.ca_bundle).decode()
    assert [w["clientConfig"]["caBundle"] for w in stub.config["webhooks"]] == [bundle] * 2
    assert stub.puts == ["secret", "config"]
    asyncio.run(cert.once())  # nothing due: nothing written
    assert stub.puts == ["secret", "config"]


def test_two_replicas_setting_the_same_bundle_at_once_is_no_failure() -> None:
    stub = Stub()
    stub.race = True
    cert = OwnCertificate(stub, "ns", "tls", "hook", Wanted(("svc.ns.svc",)), tls_context(),  # type: ignore[arg-type]
                          Logger("error"), clock=lambda: NOW)  # fmt: skip
    asyncio.run(cert.once())  # a 409 on the configuration is read again, not raised
    assert stub.puts == ["secret", "config"]  # read again: the other replica had set it
    assert cert.loaded is not None
