"""The one kubeconfig loader: an ``ApiConfig`` for every command and for the injector.

Guarantees: kubectl's precedence and merge, the pod's service account only when no
kubeconfig file exists (contract §7 "Kubeconfig"); a field no path implements is
refused, never ignored; every problem is a ``ConfigError`` of one line naming the
field; ``run`` and ``lock`` never import the official client.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from .apiconfig import ApiConfig as ApiConfig
from .apiconfig import ConfigError as ConfigError
from .apiconfig import Headers, TlsFiles
from .apiconfig import TokenFile as TokenFile
from .apiconfig import tls_context as tls_context
from .kubeconfig import Entry, files, label, read

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Fields no path implements, and why: refused, never ignored.
UNSUPPORTED = {
    ("user", "username"): "basic authentication left Kubernetes in 1.19",
    ("user", "password"): "basic authentication left Kubernetes in 1.19",
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
    config.impersonation = _impersonate(as_user, as_groups, Entry("user", "", {}, Path()))
    return config


def resolve_namespace(explicit: str | None, config: ApiConfig) -> str:
    """Which namespace a command works in (contract §7, "Namespace"): the flag; the service
    account's; $POD_NAMESPACE; the kubeconfig's; else ``default``."""
    own = config.namespace if config.in_cluster else None
    return explicit or own or os.environ.get("POD_NAMESPACE") or config.namespace or "default"


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
    server = cluster.text("server") or ""
    try:
        url = urlsplit(server)
        _ = url.port  # raises for a port that is not a number
    except ValueError:  # that, or an unclosed bracket
        url = urlsplit("")
    if url.scheme not in ("https", "http"):
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
    config = ApiConfig(
        server=server.rstrip("/"),
        ssl_context=tls.context(cluster.error, user.error),
        token=user.text("token"),
        namespace=ctx.text("namespace"),
        source=f"kubeconfig {label(paths)} (context {name})",
        tls_files=tls,
        impersonation=_impersonate(as_user, as_groups, user),
        token_file=TokenFile(Path(token_path)) if (token_path := user.path("tokenFile")) else None,
    )
    if user.body.get("exec") or user.body.get("auth-provider"):
        _plugin(config, cluster, user, plugins)
    return config


def _impersonate(as_user: str | None, as_groups: tuple[str, ...], user: Entry) -> Headers:
    """The ``Impersonate-*`` headers: a user, each group, a uid; the flags win over ``user``'s."""
    name = as_user or user.text("as")
    groups, uid = as_groups or user.strings("as-groups"), user.text("as-uid")
    if name:
        uids = (("Impersonate-Uid", uid),) if uid else ()
        return (("Impersonate-User", name), *(("Impersonate-Group", g) for g in groups), *uids)
    if as_groups:
        raise ConfigError("--as-group needs --as")
    if groups or uid:
        raise user.error(f"user {user.name!r} sets as-groups or as-uid without as")
    return ()


def _plugin(config: ApiConfig, cluster: Entry, user: Entry, allowed: bool) -> None:
    """Give ``config`` the token or client certificate of the user's plugin (official client).

    The client sees this one user and cluster, never the files (its merge is not kubectl's).
    """
    who = f"kubeconfig {user.origin}: user {user.name!r}"
    field = "exec" if user.body.get("exec") else "auth-provider"
    uses = f"{who} uses a credential plugin ({field})"
    if not allowed:
        raise ConfigError(
            f"{uses}, which run and lock do not run (in a pod they use its service account); "
            "give a token, token file or client certificate"
        )
    try:
        import kubernetes
    except ImportError:
        raise ConfigError(
            f"{uses}, which needs the official client: pip install 'grelmicro-sidecar[kubectl]'"
        ) from None
    from logging.handlers import BufferingHandler  # not on run's path

    one = {"cluster": cluster.body, "user": user.body, "context": {"cluster": "c", "user": "c"}}
    document = {f"{k}s": [{"name": "c", k: v}] for k, v in one.items()} | {"current-context": "c"}
    cfg = kubernetes.client.Configuration()
    logged = BufferingHandler(100)  # the client logs a failing plugin instead of raising
    logged.setLevel(logging.WARNING)
    logging.getLogger().addHandler(logged)
    try:
        loader = kubernetes.config.kube_config.KubeConfigLoader
        loader(document, config_base_path=str(user.origin.parent)).load_and_set(cfg)
    except Exception as err:  # the client's loaders raise more than ConfigException
        raise ConfigError(f"{who}: {' '.join(str(err).split())}") from None
    finally:
        logging.getLogger().removeHandler(logged)

    def token() -> str | None:  # asked on each request: the client renews an expired one
        header = cfg.get_api_key_with_prefix("BearerToken")
        return str(header or "").removeprefix("Bearer ").strip() or None

    config.token, config.token_file = None, None
    if token():
        config.token_source = token
    elif cfg.cert_file and cfg.key_file:
        ca = config.tls_files
        tls = TlsFiles(ca.ca_path, ca.ca_data, str(cfg.cert_file), None, str(cfg.key_file))
        config.ssl_context, config.tls_files = tls.context(cluster.error, user.error), tls
    else:
        why = f": {' '.join(logged.buffer[-1].getMessage().split())}" if logged.buffer else ""
        raise ConfigError(f"{who}: its plugin gave no credential{why}")
