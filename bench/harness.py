"""What every scenario shares: candidates as real processes, their credentials, the audit log.

Every implementation runs as its own process and says whether it leads the
same way, through ``<state-dir>/state.json`` rewritten atomically on each
change with an ``updated_at`` stamp taken when the file was written. The
harness times a handover from the instant it sent the signal to the
``updated_at`` of the successor's first "leading" file, so its own polling
interval never enters the numbers (one machine, one wall clock).

Each candidate authenticates with its own client certificate (CN
``bench:<impl>:<identity>``, group ``system:masters``), so the API server's
audit log names the candidate behind every request; each implementation also
runs in its own namespace.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.cluster import ControlPlane, free_port
from tests.cluster.pki import CertificateAuthority
from tests.sidecar.proc import read_state

from . import peers

SIDECAR_BIN = Path(sys.executable).with_name("grelmicro-sidecar")


@dataclass(frozen=True)
class Impl:
    key: str
    label: str
    namespace: str


IMPLS: dict[str, Impl] = {
    i.key: i
    for i in (
        Impl("sidecar", "grelmicro-sidecar", "bench-sidecar"),
        Impl("clientgo", "client-go leaderelection", "bench-clientgo"),
        Impl("grelmicro", "grelmicro LeaderElection", "bench-grelmicro"),
        Impl("official", "kubernetes (Python) leaderelection", "bench-official"),
    )
}


def parse_time(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Credentials:
    """Per-candidate kubeconfigs signed by the control plane's CA."""

    def __init__(self, plane: ControlPlane, directory: Path):
        self.plane = plane
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        key = serialization.load_pem_private_key((plane.pki / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        cert = x509.load_pem_x509_certificate(plane.ca_file.read_bytes())
        self.ca = CertificateAuthority(key, cert)
        self.admin = json.loads(plane.kubeconfig.read_text())
        self._lock = threading.Lock()

    def kubeconfig(self, user: str) -> Path:
        import base64

        path = self.directory / (user.replace(":", "_") + ".kubeconfig")
        if path.exists():
            return path
        with self._lock:
            cert, key = self.ca.issue(user, org="system:masters")
        config = json.loads(json.dumps(self.admin))
        config["users"][0]["user"] = {
            "client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode(),
        }
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path


@dataclass
class Candidate:
    impl: Impl
    identity: str
    election: str
    workdir: Path
    kubeconfig: Path
    proc: subprocess.Popen[bytes] | None = None
    started_wall: float = 0.0
    state_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state_dir = self.workdir / "state" / self.impl.key / self.identity
        self.log_path = self.workdir / "logs" / self.impl.key / f"{self.identity}.log"
        self.port = free_port()  # the sidecar's status port (``bench.transfer`` posts there)

    @property
    def user(self) -> str:
        return user_name(self.impl.key, self.identity)

    def argv(self) -> list[str]:
        ns, sd, kc = self.impl.namespace, str(self.state_dir), str(self.kubeconfig)
        if self.impl.key == "sidecar":
            return [
                str(SIDECAR_BIN), "run", f"--election={self.election}", f"--namespace={ns}",
                f"--identity={self.identity}", f"--kubeconfig={kc}", f"--state-dir={sd}",
                f"--port={self.port}",
            ]  # fmt: skip
        if self.impl.key == "clientgo":
            return [
                str(peers.ensure_clientgo()), f"--kubeconfig={kc}", f"--namespace={ns}",
                f"--lease=leader-{self.election}", f"--identity={self.identity}",
                f"--state-dir={sd}",
            ]  # fmt: skip
        return [
            str(peers.ensure_python_peers()), str(peers.PYPEER), self.impl.key,
            f"--kubeconfig={kc}", f"--namespace={ns}", f"--identity={self.identity}",
            f"--state-dir={sd}", f"--election={self.election}",
        ]  # fmt: skip

    def start(self) -> Candidate:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / "state.json").unlink()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        with open(self.log_path, "ab") as log:
            self.started_wall = time.time()
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        REGISTRY.add(self)
        return self

    def state(self) -> dict[str, Any] | None:
        return read_state(self.state_dir)

    def leading_since(self) -> float | None:
        """``updated_at`` of the state file while it says this candidate leads, else None."""
        state = self.state()
        if state and state.get("is_leader") and state.get("updated_at"):
            # The sidecar also rewrites its file on every renew (valid_until moves on). If
            # the harness missed the acquisition write (a starved poll loop), the file it
            # reads is a renewal's: then the acquisition instant is the Lease's acquireTime
            # (acquireTime == renewTime only in the acquiring write). The peers write on
            # transitions only, so their updated_at is always the transition.
            acquired, renewed = state.get("acquired_at"), state.get("renewed_at")
            if acquired and renewed and acquired != renewed:
                return parse_time(str(acquired))
            return parse_time(str(state["updated_at"]))
        return None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> float:
        """Send ``sig``; the wall-clock instant just before sending."""
        assert self.proc is not None
        now = time.time()
        self.proc.send_signal(sig)
        return now

    def wait(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        REGISTRY.discard(self)

    def rss_mb(self) -> float | None:
        return rss_mb(self.pid) if self.alive else None

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.pid) if self.alive else None


def user_name(impl: str, identity: str) -> str:
    return f"bench:{impl}:{identity}"


class _Registry:
    """Every candidate started, so nothing outlives the harness."""

    def __init__(self) -> None:
        self._items: set[int] = set()
        self._cands: dict[int, Candidate] = {}
        self._lock = threading.Lock()

    def add(self, cand: Candidate) -> None:
        with self._lock:
            self._cands[id(cand)] = cand

    def discard(self, cand: Candidate) -> None:
        with self._lock:
            self._cands.pop(id(cand), None)

    def kill_all(self) -> None:
        with self._lock:
            cands = list(self._cands.values())
        for cand in cands:
            cand.kill()


REGISTRY = _Registry()


class Pool:
    """Candidates of one implementation in one election, with fresh identities on restart."""

    def __init__(self, impl: Impl, election: str, workdir: Path, creds: Credentials, prefix: str):
        self.impl = impl
        self.election = election
        self.workdir = workdir
        self.creds = creds
        self.prefix = prefix
        self.members: list[Candidate] = []
        self._next = 0

    def spawn(self) -> Candidate:
        identity = f"{self.prefix}-{self._next}"
        self._next += 1
        cand = Candidate(
            self.impl,
            identity,
            self.election,
            self.workdir,
            self.creds.kubeconfig(user_name(self.impl.key, identity)),
        )
        self.members.append(cand.start())
        return cand

    def live(self) -> list[Candidate]:
        return [c for c in self.members if c.alive]

    def leaders(self) -> list[Candidate]:
        return [c for c in self.live() if c.leading_since() is not None]

    def stop(self) -> None:
        for c in self.members:
            if c.alive:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + 15
        for c in self.members:
            c.wait(max(0.1, deadline - time.monotonic()))
            c.kill()


def wait_until(predicate: Any, timeout: float, interval: float = 0.01, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# ---- /proc ---------------------------------------------------------------
_TICKS = os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def cpu_seconds(pid: int) -> float | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    return None


# ---- the audit log --------------------------------------------------------
@dataclass
class AuditRequest:
    user: str
    agent: str
    verb: str
    uri: str
    received: float
    completed: float | None
    code: int | None = None  # the HTTP status of the answer, once complete
    name: str = ""  # the object's name (objectRef; a create's and a watch's too), "" if none


class AuditLog:
    """Reads the API server's audit log (JSON lines) from a remembered offset."""

    def __init__(self, path: Path):
        self.path = path

    def offset(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def requests(self, start_offset: int = 0, prefix: str = "bench:") -> list[AuditRequest]:
        """One entry per request (auditID) made by users starting with ``prefix``."""
        by_id: dict[str, AuditRequest] = {}
        with open(self.path, "rb") as f:
            f.seek(start_offset)
            for raw in f:
                if prefix.encode() not in raw:
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                user = (ev.get("user") or {}).get("username", "")
                if not user.startswith(prefix):
                    continue
                aid = ev["auditID"]
                stage = ev.get("stage")
                req = by_id.get(aid)
                if req is None:
                    req = AuditRequest(
                        user=user,
                        agent=ev.get("userAgent", ""),
                        verb=ev.get("verb", ""),
                        uri=ev.get("requestURI", ""),
                        received=parse_time(ev["requestReceivedTimestamp"]),
                        completed=None,
                        name=(ev.get("objectRef") or {}).get("name", ""),
                    )
                    by_id[aid] = req
                if stage == "ResponseComplete" and ev.get("stageTimestamp"):
                    req.completed = parse_time(ev["stageTimestamp"])
                    req.code = (ev.get("responseStatus") or {}).get("code")
        return list(by_id.values())


def count_in_window(
    reqs: Iterable[AuditRequest], start: float, end: float
) -> dict[str, dict[str, int]]:
    """Per user, per verb: requests received in [start, end); ``watch (open)``: watches spanning it."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in reqs:
        if start <= r.received < end:
            out[r.user][r.verb] += 1
        elif (
            r.verb == "watch"
            and r.received < start
            and (r.completed is None or r.completed > start)
        ):
            out[r.user]["watch (open)"] += 1
    return {u: dict(v) for u, v in out.items()}


@contextlib.contextmanager
def cleanup_on_exit() -> Iterator[None]:
    try:
        yield
    finally:
        REGISTRY.kill_all()


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
