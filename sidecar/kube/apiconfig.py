"""The one connection value: where the API server is and how to prove who we are (``ApiConfig``).

Every command (``run``, ``lock``, ``status``, ``cleanup``) and the injector
talk to the API server through an ``ApiConfig``, however it was loaded
(``kube.config`` is the one loader): the pod's service account, a kubeconfig,
or a credential plugin run through the official client.

Guarantees: TLS verification is always on (the context checks the certificate
and the host name). A token file is re-read whenever it changes (a projected
token rotates) and once more when asked after a 401. The TLS material is kept
as it was given (``TlsFiles``), so another TLS stack (kopf's login) builds the
same trust and identity from it. An inline client key reaches OpenSSL through
an anonymous in-memory file, never a disk (where there is no memfd, not Linux,
a private temporary file removed once loaded).
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


class ConfigError(Exception):
    """The cluster connection cannot be configured; the message (one line) says what to fix."""


class ClientCertError(ConfigError):
    """The client certificate or key cannot be loaded (the user's part, not the cluster's)."""


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


@dataclass(frozen=True)
class TlsFiles:
    """The cluster CA and the client certificate and key, each a file path or PEM bytes."""

    ca_path: str | None = None
    ca_data: bytes | None = None
    cert_path: str | None = None
    cert_data: bytes | None = None
    key_path: str | None = None
    key_data: bytes | None = None

    @property
    def has_client_cert(self) -> bool:
        return bool(self.cert_path or self.cert_data) and bool(self.key_path or self.key_data)

    def context(self) -> ssl.SSLContext:
        """A verifying client context: this CA (else the system's), this client certificate.

        ConfigError says which part could not be loaded (the caller names the file).
        """
        try:
            context = tls_context(
                cafile=self.ca_path,
                cadata=self.ca_data.decode(errors="replace") if self.ca_data else None,
            )
        except ConfigError as err:
            reason = str(err).removeprefix("cannot load the cluster CA certificate: ")
            source = self.ca_path or "certificate-authority-data"
            raise ConfigError(
                f"cannot load the cluster CA certificate from {source}: {reason}"
            ) from None
        if self.has_client_cert:
            _load_client_cert(context, self)
        return context


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
    #: What ``ssl_context`` was built from.
    tls_files: TlsFiles = TlsFiles()
    #: ``Impersonate-*`` headers sent with every request (``--as``, the user's ``as``).
    impersonation: tuple[tuple[str, str], ...] = ()
    #: Loaded from the pod's service account.
    in_cluster: bool = False

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


def _load_client_cert(ctx: ssl.SSLContext, tls: TlsFiles) -> None:
    # ssl only loads certificates from paths: inline data is given as an
    # anonymous in-memory file (memfd, read through /proc/self/fd), so the
    # private key never touches a disk and ``tempfile`` (with shutil, bz2,
    # lzma, zlib) is not loaded; a temporary file only where there is no
    # memfd (not Linux).
    opened: list[int] = []
    written: list[str] = []
    try:
        cert = tls.cert_path or _pem_path(tls.cert_data or b"", opened, written)
        key = tls.key_path or _pem_path(tls.key_data or b"", opened, written)
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise ClientCertError(f"cannot load the client certificate/key: {err}") from None
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
