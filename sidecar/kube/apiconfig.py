"""The one connection value: where the API server is and how to prove who we are (``ApiConfig``).

Guarantees: TLS verification is always on (certificate and host name). A token
file is re-read whenever it changes (a projected token rotates) and once more
after a 401. The TLS material is kept as given (``TlsFiles``), so kopf's login
builds the same trust and identity. An inline client key never touches a disk.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..kit.pem import load_chain


class ConfigError(Exception):
    """The cluster connection cannot be configured; the message (one line) says what to fix."""


Fail = Callable[[str], ConfigError]  # a TLS problem's error: the loader's names the file at fault
Headers = tuple[tuple[str, str], ...]


class TokenFile:
    """A bearer token read from a file, re-read when the file changes."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def token(self, force: bool = False) -> str:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_ino)
            if force or stamp != self._stamp:
                self._token, self._stamp = self.path.read_text().strip(), stamp
        except OSError as err:
            if not self._token:  # else keep the last good one while the kubelet swaps the file
                raise ConfigError(f"cannot read token file {self.path}: {err.strerror}") from None
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

    def context(self, ca_fail: Fail = ConfigError, cert_fail: Fail = ConfigError) -> ssl.SSLContext:
        """A verifying client context: this CA (else the system's), this client certificate.

        Inline PEM never touches a disk (``kit.pem``).
        """
        ctx = tls_context(self.ca_path, self.ca_data, ca_fail)
        if not ((self.cert_path or self.cert_data) and (self.key_path or self.key_data)):
            return ctx
        try:
            load_chain(
                ctx, self.cert_path or self.cert_data or b"", self.key_path or self.key_data or b""
            )
        except OSError as err:  # ssl.SSLError too
            raise cert_fail(f"cannot load the client certificate/key: {err}") from None
        return ctx


@dataclass
class ApiConfig:
    server: str
    ssl_context: ssl.SSLContext  # built from ``tls_files``
    token: str | None = None
    token_file: TokenFile | None = None
    namespace: str | None = None
    source: str = ""
    #: A token that another loader keeps fresh (a credential plugin's, by the official client).
    token_source: Callable[[], str | None] | None = None
    tls_files: TlsFiles = TlsFiles()
    #: ``Impersonate-*`` headers sent with every request (``--as``, the user's ``as``).
    impersonation: Headers = ()
    in_cluster: bool = False  # loaded from the pod's service account
    host: str = field(init=False)  # the parts of ``server``
    port: int = field(init=False)
    base_path: str = field(init=False)
    tls: bool = field(init=False)

    def __post_init__(self) -> None:
        url = urlsplit(self.server)
        self.host, self.tls = url.hostname or "", url.scheme == "https"
        self.port, self.base_path = url.port or (443 if self.tls else 80), url.path.rstrip("/")

    def authorization(self, force_reload: bool = False) -> str | None:
        if self.token_source is not None:
            token = self.token_source()
        elif self.token_file is not None:
            token = self.token_file.token(force=force_reload)
        else:
            token = self.token
        return f"Bearer {token}" if token else None


def tls_context(
    cafile: str | None = None, cadata: bytes | None = None, fail: Fail = ConfigError
) -> ssl.SSLContext:
    """A client TLS context that verifies the server: the given CA (PEM), else the system's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    failed = f"cannot load the cluster CA certificate from {cafile or 'certificate-authority-data'}"
    pem = cadata.decode(errors="replace") if cadata else None
    try:
        if cafile or pem:
            ctx.load_verify_locations(cafile, cadata=pem)
        else:
            ctx.load_default_certs()
    except OSError as err:  # ssl.SSLError too
        raise fail(f"{failed}: {err.strerror or err}") from None
    except (ValueError, TypeError):  # TypeError: data that is not ASCII
        raise fail(f"{failed}: not a PEM certificate") from None
    return ctx
