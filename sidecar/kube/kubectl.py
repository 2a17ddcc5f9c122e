"""The official client as an optional loader: credentials of exec and auth-provider plugins.

The built-in loader (``kube.config``) picks the files, merges them, picks the
context and reads the cluster. Only when the chosen user names a credential
plugin (``exec``, what EKS, GKE and AKS write, in ``client.authentication.k8s.io``
``v1`` or ``v1beta1``; or ``auth-provider``) does it hand that one user and
cluster to the official client (``pip install 'grelmicro-sidecar[kubectl]'``)
to run it, so precedence and merge stay the built-in loader's (the client's
own merge takes ``current-context`` from the last file, kubectl from the first).

What comes back is a ``Credential``: a bearer token asked of the client on
each request (it runs the plugin again once the token has expired), or a
client certificate. Imported only by the loader, and only for such a user
when the caller allows plugins (``status``, ``cleanup``, the injector):
``run`` and ``lock`` never load the client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apiconfig import ConfigError

INSTALL_HINT = "pip install 'grelmicro-sidecar[kubectl]'"


def available() -> bool:
    """Whether the official client is installed."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Credential:
    """What a plugin gave: a token source, or a client certificate and key (files)."""

    token: Callable[[], str | None] | None = None
    cert_file: str | None = None
    key_file: str | None = None


def credential(cluster: dict[str, Any], user: dict[str, Any], base: Path, where: str) -> Credential:
    """Run the user's plugin through the official client; ConfigError (one line) when it fails.

    ``base``: the folder of the file that defined the user (a relative plugin
    command is run from there). ``where`` names the user in messages.
    """
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader

    document = {
        "current-context": "chosen",
        "contexts": [{"name": "chosen", "context": {"cluster": "chosen", "user": "chosen"}}],
        "clusters": [{"name": "chosen", "cluster": cluster}],
        "users": [{"name": "chosen", "user": user}],
    }
    cfg = client.Configuration()
    with _logged_errors() as errors:
        try:
            loader = KubeConfigLoader(config_dict=document, config_base_path=str(base))
            loader.load_and_set(cfg)
        except (ConfigException, OSError, ValueError) as err:
            raise ConfigError(f"{where}: {_one_line(str(err))}") from None
    token = bearer_token(cfg)
    if token:
        return Credential(token=lambda: bearer_token(cfg))
    if cfg.cert_file and cfg.key_file:
        return Credential(cert_file=str(cfg.cert_file), key_file=str(cfg.key_file))
    why = f": {_one_line(errors[-1])}" if errors else ""
    raise ConfigError(f"{where}: its plugin gave no credential{why}")


def bearer_token(cfg: Any) -> str | None:
    """The client configuration's token, refreshed first (an expired plugin token is renewed).

    Newer clients keep it under ``BearerToken``, older ones under ``authorization``.
    """
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    return str(header or "").removeprefix("Bearer ").strip() or None


@contextmanager
def _logged_errors() -> Iterator[list[str]]:
    """What the client logs while loading (it logs a failing plugin instead of raising)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    root = logging.getLogger()
    handler = Collect(logging.WARNING)
    root.addHandler(handler)
    try:
        yield messages
    finally:
        root.removeHandler(handler)


def _one_line(text: str) -> str:
    return " ".join(text.split())
