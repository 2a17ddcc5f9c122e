"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

What envtest does for controller-runtime, for our tests: real binaries (built by
``binaries.py``), a throwaway CA, RBAC authorization, ServiceAccount token
issuing (TokenRequest works), the admission webhook plugins, and a JSON audit
log at Metadata level so benchmarks can count requests per client. There is no
scheduler and no kubelet: Pods are created and mutated but never run.

Everything lives in one work directory: certificates, etcd data, logs, the
admin kubeconfig and ``state.json`` (pids and ports), so a control plane
started detached by one process can be stopped by another.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import binaries
from .pki import CertificateAuthority, write_service_account_keys

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


#: Ports handed out by this process, so two callers never get the same one.
_HANDED_OUT: set[int] = set()
#: Ports handed out by any process on this machine: ``<port>`` holds the PID it went to.
CLAIMS = Path(tempfile.gettempdir()) / "grelmicro-ports"


def free_port() -> int:
    """A port to listen on, below the NodePort range (30000 and up) and Linux's ephemeral one.

    A port the kernel picks (bind to 0) comes from the ephemeral range, where it
    is free now but may be taken by the next outgoing connection before the
    process it is meant for listens on it: with hundreds of sidecars starting at
    once (the bench's scale scenario) a few died of "address already in use".
    A port stays claimed (``CLAIMS``) for as long as the process that got it
    lives: a sidecar restarted on its port leaves it free for a moment, and a
    chaos run beside a bench once saw a bench sidecar take it meanwhile.
    """
    for _ in range(1000):
        port = random.randrange(20000, 30000)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        if not _claim(port):
            continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port between 20000 and 29999")


def _claim(port: int) -> bool:
    """Claim ``port`` for this process, unless a live process claimed it (a process that
    cannot write the claims, another user's, goes by the bind check alone)."""
    marker = CLAIMS / str(port)
    with contextlib.suppress(OSError, ValueError):
        owner = int(marker.read_text())
        if owner != os.getpid() and Path(f"/proc/{owner}").exists():
            return False
    with contextlib.suppress(OSError):
        CLAIMS.mkdir(mode=0o1777, exist_ok=True)
        marker.write_text(str(os.getpid()))
    return True


def _kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(cert_pem),
                        "client-key-data": b64(key_pem),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "local",
                    "context": {"cluster": "local", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "local",
        },
        indent=2,
    )


@dataclass
class State:
    """What another process needs to find and stop this control plane."""

    workdir: str
    kubeconfig: str
    server: str
    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    kcm_port: int
    pids: dict[str, int] = field(default_factory=dict)
    address: str = "127.0.0.1"
    node_name: str | None = None


class ControlPlane:
    """One control plane in ``workdir``; the admin kubeconfig is written to ``kubeconfig``."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path | None = None,
        *,
        detached: bool = False,
        address: str = "127.0.0.1",
        node_name: str | None = None,
    ):
        """``address`` is where the API server binds and what it advertises; a control
        plane for a node (``node_name`` set) binds to the node's bridge address, so pods
        reach it through the ``kubernetes`` Service, and gets the Node authorizer and
        NodeRestriction plus the certificates the kubelet and its peers use."""
        self.workdir = workdir.resolve()
        self.address = address
        self.node_name = node_name
        self.kubeconfig = (kubeconfig or self.workdir / "admin.kubeconfig").resolve()
        self.detached = detached
        self.bins: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.state: State | None = None

    # ---- paths -------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events (every stage), one JSON object per line.

        Lines are split on "\n" only: an event may hold U+0085 or another character
        ``str.splitlines`` breaks on (a webhook's denial quoting fuzzed input), which
        Go's JSON encoder leaves as is. The API server appends while we read, so a
        last line without its newline is left out, and a line a killed API server
        left half written is skipped.
        """
        events = []
        for line in self.audit_log.read_bytes().split(b"\n")[:-1]:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def server(self) -> str:
        assert self.state is not None
        return self.state.server

    # ---- lifecycle ---------------------------------------------------------
    def start(self, timeout: float = 180.0) -> None:
        started = time.monotonic()
        self.bins = binaries.ensure("kubernetes") | binaries.ensure("etcd")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki.mkdir(exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.state = State(
            workdir=str(self.workdir),
            kubeconfig=str(self.kubeconfig),
            server="",
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            apiserver_port=free_port(),
            kcm_port=free_port(),
            address=self.address,
            node_name=self.node_name,
        )
        self.state.server = f"https://{self.address}:{self.state.apiserver_port}"
        self._write_pki()
        try:
            self.start_etcd()
            self.start_apiserver(timeout=timeout)
            self.start_controller_manager()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _write_pki(self) -> None:
        assert self.state is not None
        ca = CertificateAuthority.create()
        self.ca_file.write_bytes(ca.cert_pem)
        (self.pki / "ca.key").write_bytes(ca.key_pem)
        cert, key = ca.issue(
            "kube-apiserver",
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=tuple(dict.fromkeys(("127.0.0.1", "10.0.0.1", self.address))),
            server=True,
        )
        (self.pki / "apiserver.crt").write_bytes(cert)
        (self.pki / "apiserver.key").write_bytes(key)
        write_service_account_keys(self.pki)
        admin_cert, admin_key = ca.issue("admin", org="system:masters")
        (self.pki / "admin.crt").write_bytes(admin_cert)
        (self.pki / "admin.key").write_bytes(admin_key)
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(
            _kubeconfig(self.server, ca.cert_pem, admin_cert, admin_key, "admin")
        )
        self.kubeconfig.chmod(0o600)
        kcm_cert, kcm_key = ca.issue("system:kube-controller-manager")
        (self.workdir / "kcm.kubeconfig").write_text(
            _kubeconfig(self.server, ca.cert_pem, kcm_cert, kcm_key, "kcm")
        )
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        if self.node_name:
            self._write_node_pki(ca)

    def _write_node_pki(self, ca: CertificateAuthority) -> None:
        """Kubeconfigs for the kubelet, kube-proxy and scheduler; the kubelet's serving
        certificate; the API server's client certificate for talking to the kubelet."""
        assert self.node_name
        clients = {
            "kubelet": (f"system:node:{self.node_name}", "system:nodes"),
            "kube-proxy": ("system:kube-proxy", None),
            "kube-scheduler": ("system:kube-scheduler", None),
        }
        for name, (cn, org) in clients.items():
            cert, key = ca.issue(cn, org=org)
            (self.workdir / f"{name}.kubeconfig").write_text(
                _kubeconfig(self.server, ca.cert_pem, cert, key, name)
            )
        cert, key = ca.issue(
            self.node_name,
            dns=(self.node_name, "localhost"),
            ips=(self.address, "127.0.0.1"),
            server=True,
        )
        (self.pki / "kubelet.crt").write_bytes(cert)
        (self.pki / "kubelet.key").write_bytes(key)
        cert, key = ca.issue("kube-apiserver-kubelet-client", org="system:masters")
        (self.pki / "apiserver-kubelet-client.crt").write_bytes(cert)
        (self.pki / "apiserver-kubelet-client.key").write_bytes(key)

    def _node_apiserver_flags(self) -> list[str]:
        if not self.node_name:
            return [
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            ]
        pki = self.pki
        return [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _spawn(
        self,
        name: str,
        argv: list[str],
        *,
        pass_fds: tuple[int, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        assert self.state is not None
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.workdir,
                pass_fds=pass_fds,
                env=env,
            )
        self.procs[name] = proc
        self.state.pids[name] = proc.pid
        self._save_state()

    def _save_state(self) -> None:
        assert self.state is not None
        (self.workdir / "state.json").write_text(json.dumps(asdict(self.state), indent=2))

    def start_etcd(self) -> None:
        assert self.state is not None
        client = f"http://127.0.0.1:{self.state.etcd_port}"
        peer = f"http://127.0.0.1:{self.state.etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.bins["etcd"]),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )

    def start_apiserver(self, timeout: float = 120.0) -> None:
        assert self.state is not None
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(self.bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.state.etcd_port}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.state.apiserver_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                *self._node_apiserver_flags(),
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--profiling=false",
                "--v=1",
            ],
        )
        self.wait_ready(timeout)

    def start_controller_manager(self) -> None:
        assert self.state is not None
        kcm_kubeconfig = self.workdir / "kcm.kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins["kube-controller-manager"]),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.state.kcm_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                "--controllers=*",
                "--v=1",
            ],
        )

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        assert self.state is not None
        pid = self.state.pids.pop(name, None)
        proc = self.procs.pop(name, None)
        if pid is None:
            return
        _terminate(pid, sig, timeout, proc)
        self._save_state()

    def stop_apiserver(self) -> None:
        self.stop_process("kube-apiserver")

    def restart_apiserver(self, downtime: float = 0.0) -> None:
        self.stop_apiserver()
        time.sleep(downtime)
        self.start_apiserver()

    def restart_etcd(self, downtime: float = 0.0) -> None:
        self.stop_process("etcd")
        time.sleep(downtime)
        self.start_etcd()

    def backup_etcd(self, dest: Path) -> None:
        """A cold copy of etcd's data directory: the state a snapshot restore brings back."""
        self.stop_process("etcd")
        shutil.copytree(self.workdir / "etcd", dest)
        self.start_etcd()

    def restore_etcd(self, backup: Path, bump: int = 0) -> None:
        """Restore etcd from ``backup`` as an operator does: API server stopped, data replaced.

        ``bump`` 0: the revision goes back to the backup's, the case the sidecar
        must survive. ``bump`` > 0 does what ``etcdutl snapshot restore
        --bump-revision --mark-compacted`` does (we have no ``etcdutl``): before
        the API server starts, the store's revision is moved ``bump`` past the
        one it had before the restore (writes of one scratch key) and compacted
        there. Objects keep the resourceVersions of the backup; every later
        write gets a larger one than any written before the restore.
        """
        self.stop_apiserver()
        before = self.etcd_revision() if bump else 0
        self.stop_process("etcd")
        shutil.rmtree(self.workdir / "etcd")
        shutil.copytree(backup, self.workdir / "etcd")
        self.start_etcd()
        if bump:
            self._bump_etcd_revision(before + bump)
        self.start_apiserver()

    def _etcd(self, path: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """One call to etcd's JSON gateway (``/v3/...``), plain HTTP on localhost."""
        assert self.state is not None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.state.etcd_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def etcd_revision(self, timeout: float = 30.0) -> int:
        """etcd's current revision (waits for etcd to answer)."""
        key = base64.b64encode(b"\0").decode()
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self._etcd("/v3/kv/range", {"key": key, "limit": 1})
                return int(answer["header"]["revision"])
            except (OSError, ValueError, KeyError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _bump_etcd_revision(self, target: int) -> None:
        key = base64.b64encode(b"/grelmicro-tests/bump-revision").decode()
        revision = self.etcd_revision()
        while revision < target:
            answer = self._etcd("/v3/kv/put", {"key": key, "value": ""})
            revision = int(answer["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": revision})

    def stop(self) -> None:
        """Stop every process (controller-manager, API server, etcd, in that order)."""
        if self.state is None:
            return
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            self.stop_process(name)
        for name in list(self.state.pids):
            self.stop_process(name)

    # ---- health ------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            proc = self.procs.get("kube-apiserver")
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    f"kube-apiserver exited with {proc.returncode}:\n{self.log_tail('kube-apiserver')}"
                )
            try:
                status, body = self.get("/readyz")
                if status == 200 and body.strip() == b"ok":
                    return
                last = (status, body[-500:])
            except (OSError, ssl.SSLError) as err:
                last = err
            time.sleep(0.2)
        raise TimeoutError(
            f"kube-apiserver not ready after {timeout}s: {last}\n{self.log_tail('kube-apiserver')}"
        )

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return f"(no {path})"
        text = path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        kubectl = self.bins.get("kubectl") or binaries.ensure("kubernetes")["kubectl"]
        return subprocess.run(
            [str(kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            input=input,
        )

    @classmethod
    def attach(cls, kubeconfig: Path) -> ControlPlane:
        """The control plane that ``start --kubeconfig`` left running for this kubeconfig."""
        workdir = detached_workdir(kubeconfig)
        data = json.loads((workdir / "state.json").read_text())
        plane = cls(
            workdir,
            kubeconfig,
            address=data.get("address", "127.0.0.1"),
            node_name=data.get("node_name"),
        )
        plane.state = State(**data)
        return plane

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def detached_workdir(kubeconfig: Path) -> Path:
    return kubeconfig.resolve().with_name(kubeconfig.name + ".cluster")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _terminate(pid: int, sig: int, timeout: float, proc: subprocess.Popen[bytes] | None) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not _alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(10)
