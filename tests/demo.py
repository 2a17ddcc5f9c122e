"""``make demo``: leader election you can watch, on a real control plane, in about a minute.

Where this machine can run a node (root, Linux with cgroups) ``make demo`` runs
``tests/demo_pods.py`` instead: the same story on real pods, with the chart.
``DEMO_MODE=process`` or ``DEMO_MODE=pods`` chooses explicitly. The process demo:

1. Start the embedded control plane (``tests/cluster``: etcd, kube-apiserver,
   kube-controller-manager on loopback; no Docker, no kubelet).
2. Start three sidecars, ``pod-a``, ``pod-b`` and ``pod-c``, as real
   ``grelmicro-sidecar run`` processes in one election (Lease ``leader-demo``).
3. A live view of who leads: for each sidecar, what its ``GET /leader`` answers
   and what its state file says.
4. ``kill -9`` the leader (a crash: no release). The others wait for the Lease
   to expire, then one takes over. The crashed pod comes back as a follower.
5. ``SIGTERM`` the new leader (what ``kubectl delete pod`` does): it steps
   down, releases the Lease, and a follower takes over at once.
6. ``kubectl get leases`` and ``grelmicro-sidecar status``.
7. Stop every process and delete the work directory.

It finishes by itself. Ctrl-C (or SIGTERM) at any moment stops every process
it started and removes its files. ``DEMO_PACE`` scales the pauses that leave
time to read (default 1; the tests use less).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from tests.cluster import ControlPlane, free_port

NAMESPACE = "demo"
ELECTION = "demo"
PODS = ("pod-a", "pod-b", "pod-c")
TIMING = {"lease-duration": "6s", "renew-deadline": "4s", "retry-period": "1s"}
LEASE_SECONDS = 6
SIDECAR = Path(sys.executable).with_name("grelmicro-sidecar")
SELECTOR = "app.kubernetes.io/managed-by=grelmicro"

TTY = sys.stdout.isatty()
BOLD, DIM, GREEN, RESET = ("\033[1m", "\033[2m", "\033[32m", "\033[0m") if TTY else ("", "", "", "")


def say(text: str = "") -> None:
    print(text, flush=True)


def title(text: str) -> None:
    say(f"\n{BOLD}== {text}{RESET}")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop everything and leave nothing behind."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


class Sidecar:
    def __init__(self, name: str, workdir: Path, kubeconfig: Path):
        self.name = name
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            str(SIDECAR),
            "run",
            f"--election={ELECTION}",
            f"--namespace={NAMESPACE}",
            f"--identity={self.name}",
            f"--kubeconfig={self.kubeconfig}",
            f"--state-dir={self.workdir / self.name}",
            f"--port={self.port}",
            *(f"--{k}={v}" for k, v in TIMING.items()),
        ]
        with open(self.workdir / f"{self.name}.log", "ab") as log:
            # Its own session: a Ctrl-C reaches the demo only, which then stops
            # the sidecars in order instead of all of them dying at once.
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(5)

    def view(self) -> dict[str, Any]:
        """What the app container next to this sidecar would see."""
        if not self.alive:
            return {"running": False}
        code = 0
        with contextlib.suppress(OSError):
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/leader", timeout=1
                ) as resp:
                    code = resp.status
            except urllib.error.HTTPError as err:
                code = err.code
        state: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            state = json.loads((self.workdir / self.name / "state.json").read_text())
        return {
            "running": True,
            "http": code,
            "leader": bool(state.get("is_leader")) and code == 200,
            "holder": state.get("holder"),
            "token": state.get("fencing_token"),
        }


class Demo:
    def __init__(self) -> None:
        self.pace = float(os.environ.get("DEMO_PACE", "1"))
        self.workdir = Path(tempfile.mkdtemp(prefix="grelmicro-demo-"))
        self.plane = ControlPlane(self.workdir / "cluster")
        self.sidecars: dict[str, Sidecar] = {}
        self.started = time.monotonic()
        self._shown: list[str] = []

    # ---- the live view ----------------------------------------------------------
    def rows(self) -> list[str]:
        out = []
        for name, sidecar in self.sidecars.items():
            v = sidecar.view()
            if not v["running"]:
                out.append(f"  {name}  {DIM}stopped{RESET}")
            elif v["leader"]:
                out.append(
                    f"  {name}  {GREEN}{BOLD}LEADER  {RESET} GET /leader -> {v['http']}   "
                    f"fencing token {v['token']}"
                )
            elif not v["http"]:
                out.append(f"  {name}  {DIM}starting (not answering yet){RESET}")
            else:
                seen = v["holder"] or "nobody"
                out.append(f"  {name}  follower  GET /leader -> {v['http']}   sees leader: {seen}")
        return out

    def watch(self, until: Callable[[], bool] | None, seconds: float) -> bool:
        """Show the view until ``until()`` holds (True) or ``seconds`` pass (False)."""
        deadline = time.monotonic() + seconds
        while True:
            rows = self.rows()
            if rows != self._shown:
                stamp = f"{DIM}t+{time.monotonic() - self.started:5.1f}s{RESET}"
                if TTY and self._shown:
                    sys.stdout.write(f"\033[{len(self._shown) + 1}A\033[J")
                say(stamp)
                for row in rows:
                    say(row)
                self._shown = rows
            if until is not None and until():
                return True
            if time.monotonic() >= deadline:
                return until is None
            time.sleep(0.1)

    def pause(self, seconds: float) -> None:
        self.watch(None, seconds * self.pace)

    def freeze_view(self) -> None:
        """Keep the last view on screen; the next one starts below it."""
        self._shown = []

    def leader(self) -> str | None:
        leaders = [n for n, s in self.sidecars.items() if s.view().get("leader")]
        return leaders[0] if len(leaders) == 1 else None

    # ---- the story ----------------------------------------------------------------
    def run(self) -> None:
        title("1. Start a Kubernetes control plane on this machine")
        say("   etcd, kube-apiserver and kube-controller-manager, real binaries on 127.0.0.1")
        say(f"   (work directory {self.workdir})")
        self.plane.start()
        say(f"   ready in {self.plane.startup_seconds:.1f}s at {self.plane.server}")
        self.plane.kubectl("create", "namespace", NAMESPACE)

        title(
            f"2. Start three sidecars in one election (Lease leader-{ELECTION}, namespace {NAMESPACE})"
        )
        say(
            "   grelmicro-sidecar run --election=demo --identity=<pod> "
            + " ".join(f"--{k}={v}" for k, v in TIMING.items())
        )
        for name in PODS:
            sidecar = Sidecar(name, self.workdir, self.plane.kubeconfig)
            sidecar.start()
            self.sidecars[name] = sidecar

        title("3. Who leads? (live: each sidecar's GET /leader and state file)")
        say(
            f"   No Lease exists yet: each waits one lease duration ({LEASE_SECONDS}s) before "
            "creating it, in case someone led under a Lease that was deleted."
        )
        if not self.watch(lambda: self.leader() is not None, 30):
            raise RuntimeError(f"nobody leads after 30s; logs in {self.workdir}")
        first = self.leader()
        self.pause(3)
        self.freeze_view()
        assert first is not None
        say(f"   What the app next to {first} reads in $LEADER_ELECTION_STATE_FILE:")
        with contextlib.suppress(OSError):
            state = (self.workdir / first / "state.json").read_text().rstrip()
            say("\n".join(f"     {line}" for line in state.splitlines()))
        self.pause(2)
        self.freeze_view()

        title(f"4. kill -9 {first}: a crash, it cannot release the Lease")
        say(
            f"   The others take over only once the Lease has expired ({LEASE_SECONDS}s after its last renewal)."
        )
        killed_at = time.monotonic()
        self.sidecars[first].signal(signal.SIGKILL)
        if not self.watch(lambda: self.leader() not in (None, first), 60):
            raise RuntimeError(f"nobody took over from {first}; logs in {self.workdir}")
        second = self.leader()
        took = time.monotonic() - killed_at
        self.freeze_view()
        say(
            f"   {BOLD}{second} took over {took:.1f}s after the crash{RESET} "
            f"(the Lease expired {LEASE_SECONDS}s after {first}'s last renewal)"
        )
        say(f"   {first} comes back, as a follower:")
        self.sidecars[first].start()
        self.watch(lambda: self.sidecars[first].view().get("holder") == second, 20)
        self.pause(2)
        self.freeze_view()

        title(f"5. SIGTERM {second}: a graceful stop, like kubectl delete pod")
        say('   It says "not leader" first, then releases the Lease; a follower sees it at once.')
        assert second is not None
        stopped_at = time.monotonic()
        self.sidecars[second].signal(signal.SIGTERM)
        if not self.watch(lambda: self.leader() not in (None, second), 30):
            raise RuntimeError(f"nobody took over from {second}; logs in {self.workdir}")
        third = self.leader()
        took = time.monotonic() - stopped_at
        self.freeze_view()
        say(
            f"   {BOLD}{third} took over {took:.1f}s after the SIGTERM{RESET} (no waiting for expiry)"
        )
        self.pause(2)
        self.freeze_view()

        title(f"6. kubectl get leases -n {NAMESPACE}")
        say(self.plane.kubectl("get", "leases", "-n", NAMESPACE).stdout.rstrip())
        title(f"   grelmicro-sidecar status --namespace {NAMESPACE}")
        status = subprocess.run(
            [
                str(SIDECAR),
                "status",
                f"--namespace={NAMESPACE}",
                f"--kubeconfig={self.plane.kubeconfig}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        say(status.stdout.rstrip() or status.stderr.rstrip())

    def cleanup(self) -> None:
        """Stop the sidecars (they release and sweep), then the control plane; delete the files."""
        for sidecar in self.sidecars.values():
            sidecar.signal(signal.SIGTERM)
        for sidecar in self.sidecars.values():
            sidecar.stop()
        self.plane.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def main() -> int:
    """The pod demo where this machine can run a node (``DEMO_MODE=pods``), else the process demo."""
    from tests.cluster.host import unsupported_reason

    mode = os.environ.get("DEMO_MODE", "auto")
    reason = unsupported_reason()
    if mode == "pods" or (mode == "auto" and reason is None):
        from tests import demo_pods

        return demo_pods.main()
    if mode == "auto":
        say(f"{DIM}No real node here ({reason}): the demo runs the sidecars as processes.{RESET}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    demo: Demo | None = None
    code = 0
    try:
        demo = Demo()
        demo.run()
    except (Interrupted, KeyboardInterrupt) as why:
        say(f"\n{BOLD}Interrupted ({why or 'SIGINT'}): stopping everything.{RESET}")
        code = 130
    except Exception as err:
        say(f"\ndemo failed: {err}")
        code = 1
    finally:
        # Nothing may interrupt the cleanup: a second Ctrl-C must not leave processes behind.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        if demo is not None:
            title("7. Stop everything")
            demo.cleanup()
            say(f"   every process stopped; {demo.workdir} removed")
    return code


if __name__ == "__main__":
    sys.exit(main())
