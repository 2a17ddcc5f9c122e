"""Where the API server is and how to prove who we are.

In a pod: the service-account token, CA and namespace mounted at
``/var/run/secrets/kubernetes.io/serviceaccount``. The projected token rotates
(the kubelet rewrites it well before it expires), so the token is re-read
whenever the file changes, and once more after a 401.

For development: a kubeconfig (``--kubeconfig``, then ``$KUBECONFIG``, then
``~/.kube/config``) with a token, a token file or a client certificate. TLS
verification is always on: a kubeconfig that asks to skip it is refused.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: kubeconfig fields the built-in loader does not implement: refused, never ignored.
UNSUPPORTED_USER = ("as", "as-groups", "as-uid", "as-user-extra", "username", "password")
UNSUPPORTED_CLUSTER = ("proxy-url", "tls-server-name")


class ConfigError(Exception):
    """The cluster connection cannot be configured; the message says what to fix."""


class TokenFile:
    """A bearer token read from a file, re-read when the file changes."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def token(self, force: bool = False) -> str:
        try:
            st = self.path.stat()
        except OSError as err:
            if self._token:
                return self._token  # keep the last good token while the kubelet swaps the file
            raise ConfigError(f"cannot read token file {self.path}: {err.strerror}") from None
        stamp = (st.st_mtime_ns, st.st_ino)
        if force or stamp != self._stamp:
            try:
                self._token = self.path.read_text().strip()
            except OSError as err:
                if not self._token:
                    raise ConfigError(
                        f"cannot read token file {self.path}: {err.strerror}"
                    ) from None
            self._stamp = stamp
        return self._token


@dataclass
class ApiConfig:
    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    token_file: TokenFile | None = None
    namespace: str | None = None
    source: str = ""
    #: A token that another loader keeps fresh (an exec credential plugin's).
    token_source: Callable[[], str | None] | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.server).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.server)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def base_path(self) -> str:
        return urlsplit(self.server).path.rstrip("/")

    @property
    def tls(self) -> bool:
        return urlsplit(self.server).scheme == "https"

    def authorization(self, force_reload: bool = False) -> str | None:
        if self.token_source is not None:
            token = self.token_source()
            return f"Bearer {token}" if token else None
        if self.token_file is not None:
            token = self.token_file.token(force=force_reload)
            return f"Bearer {token}" if token else None
        return f"Bearer {self.token}" if self.token else None


def tls_context(cafile: str | None = None, cadata: str | None = None) -> ssl.SSLContext:
    """A client TLS context that verifies the server: the given CA, else the system's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cafile or cadata:
            ctx.load_verify_locations(cafile=cafile, cadata=cadata)
        else:
            ctx.load_default_certs()
    except OSError as err:
        raise ConfigError(
            f"cannot load the cluster CA certificate: {err.strerror or err}"
        ) from None
    except (ssl.SSLError, ValueError):
        raise ConfigError("cannot load the cluster CA certificate: not a PEM certificate") from None
    return ctx


def in_pod() -> bool:
    """Whether this process runs in a pod with a mounted service-account token."""
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT_DIR / "token").exists()
    )


def in_cluster(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiConfig:
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
    return ApiConfig(
        server=f"https://{host}:{port}",
        ssl_context=tls_context(cafile=str(sa_dir / "ca.crt")),
        token_file=TokenFile(sa_dir / "token"),
        namespace=namespace,
        source="in-cluster service account",
    )


def kubeconfig_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0]).expanduser()
    return Path.home() / ".kube" / "config"


def _load_document(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"kubeconfig {path} is not UTF-8 text; is it the right file?") from None
    try:
        data: Any = json.loads(text)
    except ValueError:
        try:
            import yaml  # only development setups read YAML; pods never import it
        except ImportError:  # pragma: no cover - pyyaml is a dependency
            raise ConfigError(f"kubeconfig {path} is YAML but PyYAML is not installed") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"kubeconfig {path} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"kubeconfig {path} is not a kubeconfig (expected a mapping)")
    return data


class _Fields:
    """Typed access to one kubeconfig document: every problem names the file and the field."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"kubeconfig {self.path}: {message}")

    def text(self, entry: dict[str, Any], key: str, where: str) -> str | None:
        value = entry.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(f"{where}.{key} must be a string, not {type(value).__name__}")
        return value

    def named(self, section: str, name: str) -> dict[str, Any]:
        items = self.data.get(section)
        if items is not None and not isinstance(items, list):
            raise self.error(f"{section} must be a list, not {type(items).__name__}")
        for item in items or []:
            if isinstance(item, dict) and item.get("name") == name:
                inner = item.get(section[:-1])
                if inner is None:
                    return {}
                if not isinstance(inner, dict):
                    raise self.error(f"{section[:-1]} {name!r} must be a mapping")
                return inner
        raise self.error(f"no {section[:-1]} named {name!r}")

    def pem(self, entry: dict[str, Any], key: str, where: str) -> tuple[str | None, bytes | None]:
        """(path, data) for a ``<key>`` / ``<key>-data`` pair; relative paths are from the file's folder."""
        data = self.text(entry, f"{key}-data", where)
        if data is not None:
            try:
                return None, base64.b64decode(data, validate=True)
            except ValueError:
                raise self.error(f"{where}.{key}-data is not base64") from None
        file = self.text(entry, key, where)
        if file is not None:
            p = Path(file)
            return str(p if p.is_absolute() else self.path.parent / p), None
        return None, None


def from_kubeconfig(path: Path, context: str | None = None) -> ApiConfig:
    doc = _Fields(path, _load_document(path))
    name = context or doc.text(doc.data, "current-context", "kubeconfig")
    if not name:
        raise ConfigError(f"kubeconfig {path} has no current-context")
    ctx = doc.named("contexts", name)
    cluster_name = doc.text(ctx, "cluster", "context")
    user_name = doc.text(ctx, "user", "context")
    cluster = doc.named("clusters", cluster_name or "")
    user = doc.named("users", user_name) if user_name else {}
    server = doc.text(cluster, "server", "cluster")
    if server is None or urlsplit(server).scheme not in ("https", "http"):
        raise doc.error(f"cluster {cluster_name!r} has no https server URL")
    if cluster.get("insecure-skip-tls-verify"):
        raise doc.error(
            "insecure-skip-tls-verify is set; this sidecar always verifies TLS, "
            "give the cluster's certificate-authority instead"
        )
    ca_path, ca_data = doc.pem(cluster, "certificate-authority", "cluster")
    try:
        ssl_ctx = tls_context(
            cafile=ca_path, cadata=ca_data.decode(errors="replace") if ca_data else None
        )
    except ConfigError as err:
        source = ca_path or "certificate-authority-data"
        reason = str(err).removeprefix("cannot load the cluster CA certificate: ")
        raise doc.error(f"cannot load the cluster CA certificate from {source}: {reason}") from None

    cert_path, cert_data = doc.pem(user, "client-certificate", "user")
    key_path, key_data = doc.pem(user, "client-key", "user")
    if (cert_path or cert_data) and (key_path or key_data):
        _load_client_cert(ssl_ctx, cert_path, cert_data, key_path, key_data, path)
    if user.get("exec") or user.get("auth-provider"):
        raise doc.error(
            f"user {user_name!r} uses an exec/auth-provider plugin, which this sidecar does not "
            "run; use a token, token file or client certificate"
        )
    # Nothing is silently ignored: a field that would change who we are or how
    # we connect is refused (status and cleanup read it with the official client).
    unsupported = [k for k in UNSUPPORTED_USER if user.get(k)]
    unsupported += [k for k in UNSUPPORTED_CLUSTER if cluster.get(k)]
    if unsupported:
        raise doc.error(
            f"{', '.join(unsupported)} is not supported by run's built-in loader; use a kubeconfig "
            "without it (status and cleanup accept it with pip install 'grelmicro-sidecar[kubectl]')"
        )
    token_file = None
    tf_name = doc.text(user, "tokenFile", "user")
    if tf_name:
        tf = Path(tf_name)
        token_file = TokenFile(tf if tf.is_absolute() else path.parent / tf)
    return ApiConfig(
        server=server.rstrip("/"),
        ssl_context=ssl_ctx,
        token=doc.text(user, "token", "user"),
        token_file=token_file,
        namespace=doc.text(ctx, "namespace", "context"),
        source=f"kubeconfig {path} (context {name})",
    )


def _load_client_cert(
    ctx: ssl.SSLContext,
    cert_path: str | None,
    cert_data: bytes | None,
    key_path: str | None,
    key_data: bytes | None,
    source: Path,
) -> None:
    # ssl only loads certificates from paths: inline data is given as an
    # anonymous in-memory file (memfd, read through /proc/self/fd), so the
    # private key never touches a disk and ``tempfile`` (with shutil, bz2,
    # lzma, zlib: ~0.9 MB of RSS) is not loaded; a temporary file only where
    # there is no memfd (not Linux).
    opened: list[int] = []
    written: list[str] = []
    try:
        paths = [_pem_path(data, opened, written) for data in (cert_data, key_data) if data]
        ctx.load_cert_chain(cert_path or paths[0], key_path or paths[-1])
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"kubeconfig {source}: cannot load the client certificate/key: {err}"
        ) from None
    finally:
        for fd in opened:
            os.close(fd)
        for name in written:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _pem_path(data: bytes, opened: list[int], written: list[str]) -> str:
    """A path ``ssl`` can read ``data`` from; its descriptor or file is noted for clean-up."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("grelmicro-pem", os.MFD_CLOEXEC)
        opened.append(fd)
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        return f"/proc/self/fd/{fd}"
    import tempfile

    fd, name = tempfile.mkstemp(prefix="grelmicro-", suffix=".pem")
    written.append(name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return name


def load(kubeconfig: str | None) -> ApiConfig:
    """``--kubeconfig`` if given; else in-cluster; else ``$KUBECONFIG``; else ``~/.kube/config``."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig_path(kubeconfig))
    if in_pod():
        return in_cluster()
    path = kubeconfig_path(None)
    if not path.exists():
        raise ConfigError(
            f"no cluster credentials: not in a pod and no kubeconfig at {path}; pass --kubeconfig"
        )
    return from_kubeconfig(path)
