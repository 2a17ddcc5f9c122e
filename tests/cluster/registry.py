"""An OCI registry on this machine that stands in for a public one (ghcr.io) in the e2e tests.

CNCF distribution's ``registry`` (built from the Go module proxy, ``binaries.py``)
serves TLS on port 443 of a loopback address of its own (127.x.y.z, picked at
start), with a certificate for the stood-in host and that address from a
throwaway CA (``pki.py``). Nothing on the machine is redirected to it:

- the node's containerd reaches it through a hosts.toml that mirrors the host
  to the address (``mirror``, in the node's ``registry_hosts`` folder, which
  containerd reads at every pull), trusting only the throwaway CA;
- commands a user types reach it through ``hosts_file`` and ``ca_bundle``,
  which ``tests/e2e/readme.py`` puts in a private mount namespace (its
  ``/etc/hosts`` and ``SSL_CERT_FILE``) for those commands alone.

``requests()`` reads its access log: what was pushed and pulled, by whom.
Guarantees: ``stop`` ends the process, removes the mirror and the registry's
folder; ``leftovers`` lists whatever of them remains.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import binaries
from .pki import CertificateAuthority

STOOD_IN = "ghcr.io"
# "GET /v2/grelinfo/grelmicro-sidecar/manifests/sha256:... HTTP/1.1" 200 ... "containerd/v2.4.2"
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>/v2/\S*) HTTP/[\d.]+" (?P<status>\d{3})')


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str  # containerd adds ns=<the host it mirrors>
    status: int
    line: str


def _free_loopback_address() -> str:
    """A 127.x.y.z address whose port 443 nobody listens on."""
    for _ in range(50):
        address = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(1, 254)}"
        with socket.socket() as probe:
            try:
                probe.bind((address, 443))
            except OSError:
                continue
            return address
    raise RuntimeError("no loopback address with a free port 443 (is something on 0.0.0.0:443?)")


class Registry:
    """One registry serving ``STOOD_IN`` from ``workdir``."""

    def __init__(self, workdir: Path, host: str = STOOD_IN) -> None:
        self.workdir = workdir
        self.host = host
        self.address = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._mirrors: list[Path] = []

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def ca_bundle(self) -> Path:
        """The machine's roots plus the throwaway CA: ``SSL_CERT_FILE`` for a user's commands."""
        return self.workdir / "ca-bundle.crt"

    @property
    def hosts_file(self) -> Path:
        """An ``/etc/hosts`` that also maps the stood-in host to the registry."""
        return self.workdir / "hosts"

    def start(self, timeout: float = 30) -> Registry:
        binary = binaries.ensure("registry")["registry"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.address = _free_loopback_address()
        ca = CertificateAuthority.create("grelmicro-test-registry-ca")
        cert, key = ca.issue(self.host, dns=(self.host,), ips=(self.address,), server=True)
        self.ca_file.write_bytes(ca.cert_pem)
        (self.workdir / "tls.crt").write_bytes(cert)
        (self.workdir / "tls.key").write_bytes(key)
        (self.workdir / "tls.key").chmod(0o600)
        system = Path("/etc/ssl/certs/ca-certificates.crt")
        roots = system.read_bytes() if system.exists() else b""
        self.ca_bundle.write_bytes(roots + ca.cert_pem)
        hosts = Path("/etc/hosts").read_text()
        self.hosts_file.write_text(f"{hosts.rstrip()}\n{self.address} {self.host}\n")
        config = self.workdir / "config.yml"
        config.write_text(
            f"""\
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {self.workdir / "storage"}
  delete:
    enabled: true
http:
  addr: {self.address}:443
  tls:
    certificate: {self.workdir / "tls.crt"}
    key: {self.workdir / "tls.key"}
"""
        )
        env = {
            "PATH": "/usr/bin:/bin",
            # distribution v3 exports traces by default; there is nothing to send them to.
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_SDK_DISABLED": "true",
        }
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(binary), "serve", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the registry did not start:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with (
                socket.create_connection((self.address, 443), timeout=1) as raw,
                context.wrap_socket(raw, server_hostname=self.host) as tls,
            ):
                tls.sendall(f"GET /v2/ HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                return tls.recv(16).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def mirror(self, hosts_dir: Path) -> Path:
        """Make a containerd whose registry ``config_path`` is ``hosts_dir`` pull ``host``
        from this registry, trusting the throwaway CA; returns the hosts.toml."""
        folder = hosts_dir / self.host
        folder.mkdir(parents=True, exist_ok=True)
        hosts_toml = folder / "hosts.toml"
        hosts_toml.write_text(
            f"""\
server = "https://{self.host}"

[host."https://{self.address}"]
  capabilities = ["pull", "resolve"]
  ca = "{self.ca_file}"
"""
        )
        self._mirrors.append(folder)
        return hosts_toml

    def requests(self) -> list[Request]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            match = _ACCESS.search(line)
            if match:
                path, _, query = match["path"].partition("?")
                out.append(
                    Request(match["method"], path, query, int(match["status"]), line.strip())
                )
        return out

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> list[str]:
        """Stop the registry, remove its mirrors and folder; return what remains."""
        for folder in self._mirrors:
            shutil.rmtree(folder, ignore_errors=True)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)
        return self.leftovers()

    def leftovers(self) -> list[str]:
        found = [f"mirror {f} remains" for f in self._mirrors if f.exists()]
        if self.proc is not None and self.proc.poll() is None:
            found.append(f"registry process {self.proc.pid} still runs")
        if self.workdir.exists():
            found.append(f"{self.workdir} remains")
        return found

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
