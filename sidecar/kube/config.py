"""The one kubeconfig loader: an ``ApiConfig`` for every command and for the injector.

kubectl's precedence (contract §7 "Kubeconfig"): ``--kubeconfig``; else
``$KUBECONFIG``; else ``~/.kube/config``; the pod's service account only when
none of those files exists. Guarantees: one precedence and one merge for every
caller; a field no path implements is refused, never ignored; every problem is
a ``ConfigError`` of one line naming the field. A credential plugin is run by
the official client only for ``status``, ``cleanup`` and the injector: ``run``
and ``lock`` never import it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from .apiconfig import ApiConfig as ApiConfig
from .apiconfig import ClientCertError, TlsFiles
from .apiconfig import ConfigError as ConfigError
from .apiconfig import TokenFile as TokenFile
from .apiconfig import tls_context as tls_context
from .kubeconfig import Entry, files, label, read

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
BASIC_AUTH = "basic authentication left Kubernetes in 1.19"
#: Fields no path implements, and why: refused, never ignored.
UNSUPPORTED = {
    ("user", "username"): BASIC_AUTH,
    ("user", "password"): BASIC_AUTH,
    ("user", "as-user-extra"): "impersonation here sends a user, groups and a uid only",
    ("cluster", "proxy-url"): "the API server is dialled directly",
    ("cluster", "tls-server-name"): "the certificate is checked against the server URL's host",
}


def load(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    as_user: str | None = None,
    as_groups: tuple[str, ...] = (),
    plugins: bool = False,
) -> ApiConfig:
    """The connection; ``plugins``: a user's credential plugin may be run (never for ``run``)."""
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
    no_user = ConfigError("--as-group needs --as")
    config.impersonation = _impersonate(as_user, as_groups, None, no_user)
    return config


def from_kubeconfig(path: Path | str, context: str | None = None) -> ApiConfig:
    """One kubeconfig file, nothing else."""
    return load(str(path), context)


def in_cluster(sa_dir: Path | None = None) -> ApiConfig:
    """The pod's service account, and the API server's address the kubelet puts in the env."""
    sa_dir = sa_dir or SERVICE_ACCOUNT_DIR
    if not (sa_dir / "token").exists():
        raise ConfigError(
            f"no service-account token at {sa_dir}/token: set automountServiceAccountToken: true "
            "on the pod, or pass --kubeconfig"
        )
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    namespace = None
    with contextlib.suppress(OSError):
        namespace = (sa_dir / "namespace").read_text().strip() or None
    tls = TlsFiles(ca_path=str(sa_dir / "ca.crt"))
    return ApiConfig(
        server=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
        ssl_context=tls.context(),
        token_file=TokenFile(sa_dir / "token"),  # a projected token rotates
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
    current, entries = read(paths)
    name = context or current
    if not name:
        raise ConfigError(f"kubeconfig {label(paths)} has no current-context; pass --context")

    def entry(kind: str, key: str) -> Entry:
        if (kind, key) not in entries:
            raise ConfigError(f"kubeconfig {label(paths)}: no {kind} named {key!r}")
        return entries[kind, key]

    ctx = entry("context", name)
    cluster = entry("cluster", ctx.text("cluster") or "")
    user_name = ctx.text("user")
    user = entry("user", user_name) if user_name else Entry("user", "", {}, ctx.origin)
    server = cluster.text("server")
    if server is None or urlsplit(server).scheme not in ("https", "http"):
        raise cluster.error(f"cluster {cluster.name!r} has no https server URL")
    if cluster.body.get("insecure-skip-tls-verify"):
        raise cluster.error(
            "insecure-skip-tls-verify is set; this tool always verifies TLS, "
            "give the cluster's certificate-authority instead"
        )
    for (kind, field), why in UNSUPPORTED.items():
        part = user if kind == "user" else cluster
        if part.body.get(field):
            raise part.error(
                f"{kind} {part.name!r} sets {field}, which is not supported ({why}); "
                "use a kubeconfig without it"
            )
    ca = cluster.pem("certificate-authority")
    tls = TlsFiles(*ca, *user.pem("client-certificate"), *user.pem("client-key"))
    no_user = user.error(f"user {user.name!r} sets as-groups or as-uid without as")
    config = ApiConfig(
        server=server.rstrip("/"),
        ssl_context=_context(tls, cluster, user),
        token=user.text("token"),
        namespace=ctx.text("namespace"),
        source=f"kubeconfig {label(paths)} (context {name})",
        tls_files=tls,
        impersonation=_impersonate(
            as_user or user.text("as"),
            as_groups or user.strings("as-groups"),
            user.text("as-uid"),
            ConfigError("--as-group needs --as") if as_groups else no_user,
        ),
    )
    token_file = user.path("tokenFile")
    if token_file is not None:
        config.token_file = TokenFile(Path(token_file))
    if user.body.get("exec") or user.body.get("auth-provider"):
        _plugin(config, cluster, user, plugins)
    return config


def _context(tls: TlsFiles, cluster: Entry, user: Entry) -> ssl.SSLContext:
    """The TLS context; a problem names the file that wrote the part at fault."""
    try:
        return tls.context()
    except ConfigError as err:
        raise (user if isinstance(err, ClientCertError) else cluster).error(str(err)) from None


def _impersonate(
    user: str | None, groups: tuple[str, ...], uid: str | None, no_user: ConfigError
) -> tuple[tuple[str, str], ...]:
    """The ``Impersonate-*`` headers: a user, each group, a uid (groups and a uid need a user)."""
    if not user:
        if groups or uid:
            raise no_user
        return ()
    return (
        ("Impersonate-User", user),
        *(("Impersonate-Group", g) for g in groups),
        *((("Impersonate-Uid", uid),) if uid else ()),
    )


def _plugin(config: ApiConfig, cluster: Entry, user: Entry, allowed: bool) -> None:
    """Give ``config`` the token or client certificate of the user's plugin (official client).

    The client gets this one user and cluster, never the files: the precedence and
    the merge stay kubectl's (the client's own merge takes ``current-context`` from
    the last file). Its token is asked for on each request: an expired one is renewed.
    """
    who = f"kubeconfig {user.origin}: user {user.name!r}"
    uses = (
        f"{who} uses a credential plugin ({'exec' if user.body.get('exec') else 'auth-provider'})"
    )
    if not allowed:
        raise ConfigError(
            f"{uses}, which run and lock do not run (in a pod they use its service account); "
            "give a token, token file or client certificate"
        )
    try:
        from logging.handlers import BufferingHandler

        from kubernetes import client
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.kube_config import KubeConfigLoader
    except ImportError:
        raise ConfigError(
            f"{uses}, which needs the official client: pip install 'grelmicro-sidecar[kubectl]'"
        ) from None
    parts = {"context": {"cluster": "c", "user": "c"}, "cluster": cluster.body, "user": user.body}
    document = {
        "current-context": "c",
        **{f"{k}s": [{"name": "c", k: v}] for k, v in parts.items()},
    }
    cfg = client.Configuration()
    logged = BufferingHandler(100)  # the client logs a failing plugin instead of raising
    logged.setLevel(logging.WARNING)
    logging.getLogger().addHandler(logged)
    try:
        KubeConfigLoader(document, config_base_path=str(user.origin.parent)).load_and_set(cfg)
    except (ConfigException, OSError, ValueError) as err:
        raise ConfigError(f"{who}: {' '.join(str(err).split())}") from None
    finally:
        logging.getLogger().removeHandler(logged)

    def token() -> str | None:  # the client refreshes an expired token first
        header = cfg.get_api_key_with_prefix("BearerToken")
        return str(header or "").removeprefix("Bearer ").strip() or None

    config.token, config.token_file = None, None
    if token():
        config.token_source = token
    elif cfg.cert_file and cfg.key_file:
        ca = config.tls_files
        tls = TlsFiles(ca.ca_path, ca.ca_data, str(cfg.cert_file), None, str(cfg.key_file))
        config.ssl_context, config.tls_files = _context(tls, cluster, user), tls
    else:
        why = f": {' '.join(logged.buffer[-1].getMessage().split())}" if logged.buffer else ""
        raise ConfigError(f"{who}: its plugin gave no credential{why}")
