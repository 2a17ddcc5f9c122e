"""The one kubeconfig loader: an ``ApiConfig`` for every command and for the injector.

Precedence, kubectl's (client-go's loading rules; ``kube.kubeconfig``):

1. ``--kubeconfig FILE``: that file alone; it must exist;
2. else ``$KUBECONFIG``: its files, merged as kubectl merges them;
3. else ``~/.kube/config``;
4. the pod's service account only when none of those files exists (a pod
   normally has none: its sidecar uses the service account, as client-go's
   programs do).

Then the context: ``--context``, else the merged ``current-context``. The
built-in loader reads the server, the CA, a token, a token file, a client
certificate and impersonation (the user's ``as``, ``as-groups``, ``as-uid``,
or ``--as``/``--as-group``, which win), sent as ``Impersonate-*`` headers by
the project's own call path. A credential plugin (``exec``, ``auth-provider``)
is run through the official client (``kube.kubectl``) when the caller allows
it (``status``, ``cleanup``, the injector) and it is installed; ``run`` and
``lock`` never import it.

Guarantees: one precedence and one merge for every caller; a field no path
implements (``insecure-skip-tls-verify``, ``proxy-url``, ``tls-server-name``,
``username``/``password``, ``as-user-extra``) is refused with one line naming
it, never ignored. Every problem is a ``ConfigError`` of one line.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from .apiconfig import ApiConfig, ClientCertError, ConfigError, TlsFiles, TokenFile, tls_context
from .kubeconfig import Entry, Kubeconfig, files, label

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ApiConfig",
    "ConfigError",
    "TokenFile",
    "from_kubeconfig",
    "in_cluster",
    "load",
    "tls_context",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Fields refused by every path, and why; the user's first, then the cluster's.
UNSUPPORTED_USER = {
    "username": "basic authentication left Kubernetes in 1.19",
    "password": "basic authentication left Kubernetes in 1.19",
    "as-user-extra": "impersonation here sends a user, groups and a uid only",
}
UNSUPPORTED_CLUSTER = {
    "proxy-url": "the API server is dialled directly",
    "tls-server-name": "the certificate is checked against the server URL's host",
}
PLUGINS = ("exec", "auth-provider")


def load(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    as_user: str | None = None,
    as_groups: tuple[str, ...] = (),
    plugins: bool = False,
) -> ApiConfig:
    """The connection by kubectl's precedence (module docstring); ConfigError when unusable.

    ``plugins``: a user's exec/auth-provider plugin may be run through the
    official client (``status``, ``cleanup``, the injector; never ``run``).
    """
    candidates = files(kubeconfig)
    existing = [p for p in candidates if p.exists()]
    if kubeconfig and not existing:
        raise ConfigError(f"cannot read kubeconfig {candidates[0]}: no such file")
    if existing:
        return _from_files(existing, context, as_user, as_groups, plugins)
    where = label(candidates) or "~/.kube/config (no home directory)"
    if context:
        raise ConfigError(
            f"--context={context!r} names a kubeconfig context, but there is none at {where}"
        )
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise ConfigError(
            f"no cluster credentials: not in a pod and no kubeconfig at {where}; pass --kubeconfig"
        )
    config = in_cluster()
    config.impersonation = _impersonate(as_user, as_groups, None, "--as-group needs --as")
    return config


def from_kubeconfig(path: Path | str, context: str | None = None) -> ApiConfig:
    """One kubeconfig file, nothing else (``--kubeconfig`` with the built-in loader)."""
    return load(str(path), context)


def in_cluster(sa_dir: Path | None = None) -> ApiConfig:
    """The pod's service account, and the API server's address the kubelet puts in the env.

    The projected token rotates: it is re-read whenever the file changes, and after a 401.
    """
    sa_dir = sa_dir or SERVICE_ACCOUNT_DIR
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST is not set; pass --kubeconfig")
    if not (sa_dir / "token").exists():
        raise ConfigError(
            f"no service-account token at {sa_dir}/token: set automountServiceAccountToken: true "
            "on the pod, or pass --kubeconfig"
        )
    namespace = None
    with contextlib.suppress(OSError):
        namespace = (sa_dir / "namespace").read_text().strip() or None
    if ":" in host:
        host = f"[{host}]"
    tls = TlsFiles(ca_path=str(sa_dir / "ca.crt"))
    return ApiConfig(
        server=f"https://{host}:{port}",
        ssl_context=tls.context(),
        token_file=TokenFile(sa_dir / "token"),
        namespace=namespace,
        source="in-cluster service account",
        tls_files=tls,
        in_cluster=True,
    )


def _from_files(
    paths: list[Path],
    context: str | None,
    as_user: str | None,
    as_groups: tuple[str, ...],
    plugins: bool,
) -> ApiConfig:
    doc = Kubeconfig.read(paths)
    name = context or doc.current_context
    if not name:
        raise ConfigError(f"kubeconfig {doc.label} has no current-context; pass --context")
    ctx = doc.entry("contexts", name)
    cluster = doc.entry("clusters", ctx.text("cluster") or "")
    user_name = ctx.text("user")
    user = doc.entry("users", user_name) if user_name else Entry("user", "", {}, ctx.origin)
    server = cluster.text("server")
    if server is None or urlsplit(server).scheme not in ("https", "http"):
        raise cluster.error(f"cluster {cluster.name!r} has no https server URL")
    if cluster.body.get("insecure-skip-tls-verify"):
        raise cluster.error(
            "insecure-skip-tls-verify is set; this tool always verifies TLS, "
            "give the cluster's certificate-authority instead"
        )
    _refuse_unsupported(user, cluster)
    ca_path, ca_data = cluster.pem("certificate-authority")
    cert_path, cert_data = user.pem("client-certificate")
    key_path, key_data = user.pem("client-key")
    tls = TlsFiles(ca_path, ca_data, cert_path, cert_data, key_path, key_data)
    config = ApiConfig(
        server=server.rstrip("/"),
        ssl_context=_context(tls, cluster, user),
        token=user.text("token"),
        namespace=ctx.text("namespace"),
        source=f"kubeconfig {doc.label} (context {name})",
        tls_files=tls,
        impersonation=_impersonate(
            as_user or user.text("as"),
            as_groups or user.strings("as-groups"),
            user.text("as-uid"),
            "--as-group needs --as"
            if as_groups
            else f"kubeconfig {user.origin}: user {user.name!r} sets as-groups or as-uid without as",
        ),
    )
    token_file = user.path("tokenFile")
    if token_file is not None:
        config.token_file = TokenFile(token_file)
    if any(user.body.get(k) for k in PLUGINS):
        _use_plugin(config, user, cluster, plugins)
    return config


def _refuse_unsupported(user: Entry, cluster: Entry) -> None:
    for entry, fields in ((user, UNSUPPORTED_USER), (cluster, UNSUPPORTED_CLUSTER)):
        for key, why in fields.items():
            if entry.body.get(key):
                raise entry.error(
                    f"{entry.kind} {entry.name!r} sets {key}, which is not supported ({why}); "
                    "use a kubeconfig without it"
                )


def _context(tls: TlsFiles, cluster: Entry, user: Entry) -> ssl.SSLContext:
    """The TLS context; a problem names the file of the part at fault (cluster or user)."""
    try:
        return tls.context()
    except ClientCertError as err:
        raise user.error(str(err)) from None
    except ConfigError as err:
        raise cluster.error(str(err)) from None


def _use_plugin(config: ApiConfig, user: Entry, cluster: Entry, plugins: bool) -> None:
    """Give ``config`` the credential of the user's exec/auth-provider plugin, or refuse."""
    from . import kubectl

    field = next(k for k in PLUGINS if user.body.get(k))
    where = f"kubeconfig {user.origin}: user {user.name!r}"
    if not plugins:
        raise ConfigError(
            f"{where} uses a credential plugin ({field}), which run and lock do not run "
            "(in a pod they use its service account); give a token, token file or "
            "client certificate"
        )
    if not kubectl.available():
        raise ConfigError(
            f"{where} uses a credential plugin ({field}), which needs the official client: "
            f"{kubectl.INSTALL_HINT}"
        )
    got = kubectl.credential(cluster.body, user.body, user.origin.parent, where)
    config.token, config.token_file, config.token_source = None, None, got.token
    if got.cert_file and got.key_file:
        tls = TlsFiles(
            config.tls_files.ca_path, config.tls_files.ca_data, got.cert_file, None, got.key_file
        )
        config.ssl_context, config.tls_files = _context(tls, cluster, user), tls


def _impersonate(
    user: str | None, groups: tuple[str, ...], uid: str | None, without_user: str
) -> tuple[tuple[str, str], ...]:
    """The ``Impersonate-*`` headers: a user, each group, a uid (groups and a uid need a user).

    ``without_user``: the message when groups or a uid come without a user.
    """
    if not user:
        if groups or uid:
            raise ConfigError(without_user)
        return ()
    return (
        ("Impersonate-User", user),
        *(("Impersonate-Group", g) for g in groups),
        *((("Impersonate-Uid", uid),) if uid else ()),
    )
