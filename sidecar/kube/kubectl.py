"""Reaching the cluster the way kubectl does, for the human-facing commands (``status``, ``cleanup``).

The official client (``pip install 'grelmicro-sidecar[kubectl]'``) loads the
kubeconfig with kubectl's semantics: exec credential plugins
(``client.authentication.k8s.io/v1`` and ``v1beta1``: what EKS, GKE and AKS
write), a ``KUBECONFIG`` list merged, ``--context``, client certificates,
``proxy-url`` and ``tls-server-name``. Impersonation (``--as``/``--as-group``,
or the user's ``as``/``as-groups``) is sent as ``Impersonate-*`` headers, which
its loader does not do. Precedence is kubectl's: ``--kubeconfig``, then
``$KUBECONFIG``, then ``~/.kube/config``, and the pod's service account only
when none of them exists.

Imported lazily by those two commands only: ``run`` never loads the client.
Only reads and preconditioned deletes go through it, with answers kept as the
API server's JSON, so Leases are parsed by the same code as the sidecar's (the
client rewrites MicroTime on writes, which the API server refuses for Leases).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .api import unless_changed
from .config import SERVICE_ACCOUNT_DIR, ApiConfig, ConfigError, in_pod, tls_context
from .config import load as load_builtin
from .errors import ApiUnavailable, error_for

INSTALL_HINT = "pip install 'grelmicro-sidecar[kubectl]'"


def available() -> bool:
    """Whether the official client is installed (else the built-in loader serves)."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Target:
    api: Any  # kubernetes.client.ApiClient
    namespace: str | None  # the context's (or the service account's in a pod)
    source: str
    in_cluster: bool = False


def _paths(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def _user_entry(paths: list[Path], name: str) -> dict[str, Any]:
    """The named user as kubectl merges them: the first file that defines it wins."""
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        for entry in doc.get("users") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                user = entry.get("user")
                return user if isinstance(user, dict) else {}
    return {}


def connect(
    kubeconfig: str | None,
    context: str | None = None,
    as_user: str | None = None,
    as_groups: tuple[str, ...] = (),
) -> Target:
    """An API client for ``kubeconfig``/``context``; ConfigError with one line when it cannot."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    paths = _paths(kubeconfig)
    existing = [p for p in paths if p.exists()]
    cfg = client.Configuration()
    try:
        if kubeconfig or existing:
            if kubeconfig and not existing:
                raise ConfigError(f"cannot read kubeconfig {paths[0]}: no such file")
            files = os.pathsep.join(str(p) for p in existing)
            config.load_kube_config(
                config_file=files, context=context, client_configuration=cfg, persist_config=False
            )
            contexts, current = config.list_kube_config_contexts(config_file=files)
            chosen = next((c for c in contexts if c["name"] == context), current) or {}
            ctx = chosen.get("context") or {}
            user = _user_entry(existing, str(ctx.get("user", "")))
            namespace = ctx.get("namespace")
            source = f"kubeconfig {files} (context {chosen.get('name')})"
            in_cluster = False
        elif in_pod():
            config.load_incluster_config(client_configuration=cfg)
            user, source, in_cluster = {}, "in-cluster service account", True
            namespace = _read(SERVICE_ACCOUNT_DIR / "namespace")
        else:
            raise ConfigError(
                f"no cluster credentials: not in a pod and no kubeconfig at {paths[0]}; "
                "pass --kubeconfig"
            )
    except ConfigException as err:
        where = f"context {context!r}" if context else "the kubeconfig"
        raise ConfigError(f"cannot use {where}: {str(err).strip()}") from None
    api = client.ApiClient(cfg)
    who = as_user or user.get("as")
    groups = as_groups or tuple(user.get("as-groups") or ())
    if groups and not who:
        raise ConfigError("--as-group needs --as (a user to impersonate)")
    if len(groups) > 1:
        raise ConfigError("impersonate one group at a time (--as-group once)")
    if who:
        api.set_default_header("Impersonate-User", str(who))
    if groups:
        api.set_default_header("Impersonate-Group", str(groups[0]))
    return Target(api, namespace, source, in_cluster)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class OfficialLeases:
    """The Lease reads and deletes of ``status`` and ``cleanup``, through the official client."""

    def __init__(self, target: Target, namespace: str):
        from kubernetes import client

        self.namespace = namespace
        self._api = target.api
        self._leases = client.CoordinationV1Api(target.api)

    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: Any = None
    ) -> tuple[list[dict[str, Any]], str]:
        def call() -> Any:
            options = {
                "label_selector": label_selector,
                "field_selector": field_selector,
                "_preload_content": False,
                "_request_timeout": timeout or 30,
            }
            if not self.namespace:  # status -A
                return self._leases.list_lease_for_all_namespaces(**options)
            return self._leases.list_namespaced_lease(self.namespace, **options)

        data = json.loads((await self._call(call, "list leases")).data)
        meta = data.get("metadata") or {}
        return list(data.get("items") or []), str(meta.get("resourceVersion", ""))

    async def delete(self, name: str, resource_version: str) -> None:
        def call() -> Any:
            return self._leases.delete_namespaced_lease(
                name,
                self.namespace,
                body=unless_changed(resource_version),
                _preload_content=False,
                _request_timeout=30,
            )

        await self._call(call, "delete leases")

    async def _call(self, call: Any, what: str) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return await asyncio.to_thread(call)
        except ApiException as err:
            body = err.body if isinstance(err.body, bytes) else str(err.body or "").encode()
            raise error_for(int(err.status or 0), what, body) from None
        except (HTTPError, OSError) as err:
            raise ApiUnavailable(f"{what}: {err}", verb=what.split()[0]) from None

    def close(self) -> None:
        self._api.close()


def api_config(target: Target) -> ApiConfig:
    """The project's own connection settings from what the official client loaded.

    For the injector outside a cluster: its calls keep the project's call path,
    while the kubeconfig is read as kubectl reads it. The token (an exec
    plugin's) is asked of the client's loader on each request, which runs the
    plugin again when it expires. What that call path cannot do (a proxy, a
    TLS server name, impersonation) is refused with one line.
    """
    cfg = target.api.configuration
    if getattr(cfg, "proxy", None):
        raise ConfigError("proxy-url is not supported by the injector; connect directly")
    if getattr(cfg, "tls_server_name", None):
        raise ConfigError("tls-server-name is not supported by the injector")
    if "Impersonate-User" in target.api.default_headers:
        raise ConfigError("impersonation (as) is not supported by the injector")
    if not cfg.verify_ssl:
        raise ConfigError("insecure-skip-tls-verify is set; the injector always verifies TLS")
    context = tls_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file and cfg.key_file:
        try:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(
                f"{target.source}: cannot load the client certificate: {err}"
            ) from None

    return ApiConfig(
        server=str(cfg.host).rstrip("/"),
        ssl_context=context,
        token_source=lambda: bearer_token(cfg),
        namespace=target.namespace,
        source=target.source,
    )


def bearer_token(cfg: Any) -> str | None:
    """The client configuration's token, refreshed first (an exec plugin runs again once expired).

    Newer clients keep it under ``BearerToken``, older ones under ``authorization``.
    """
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    return str(header or "").removeprefix("Bearer ").strip() or None


def reads_kubeconfig(kubeconfig: str | None) -> bool:
    """Whether a long-running process reads a kubeconfig as kubectl does, not its service account.

    Outside a pod, or given ``--kubeconfig``, with the official client installed.
    """
    return bool(kubeconfig or not in_pod()) and available()


@functools.cache
def shared(kubeconfig: str | None) -> Target:
    """One connection per kubeconfig for a long-running process (the injector).

    Its check at start-up, its calls and its logins share it, so an exec plugin
    runs once, and again only when the client finds its token expired.
    """
    return connect(kubeconfig)


def load(kubeconfig: str | None) -> ApiConfig:
    """In a pod without ``--kubeconfig``: its service account; else the kubeconfig as kubectl reads it.

    Falls back to the built-in loader when the official client is not installed.
    """
    if reads_kubeconfig(kubeconfig):
        return api_config(shared(kubeconfig))
    return load_builtin(kubeconfig)
