"""Who used this machine's CPU in a window, by kind of process: the node's share of a pause.

An app that was not run for half a second on a 2-core machine was not run
because others were: this says who, from ``/proc`` (every process's
``utime + stime``, sampled twice a second in a thread), grouped by what the
process is (the control plane's binaries, containerd and runc, the sidecar in
pods started during the window or before it, the injector, the apps, this
harness). A process that started and ended between two samples is not seen:
the machine's total busy time (``/proc/stat``) minus what was seen is reported
as ``unseen``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
#: Processes told apart by their name (``comm``) alone.
BY_NAME = {
    "kube-apiserver": "kube-apiserver",
    "etcd": "etcd",
    "kubelet": "kubelet",
    "containerd": "containerd",
    "containerd-shim": "containerd-shim",
    "runc": "runc",
    "runc:[2:INIT]": "runc",
    "kube-controller": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "kube-proxy": "kube-proxy",
    "coredns": "coredns",
    "kubectl": "kubectl",
    "helm": "helm",
}


def _kind(pid: str, comm: str) -> str:
    if comm in BY_NAME:
        return BY_NAME[comm]
    if int(pid) == os.getpid():
        return "bench harness"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    if b"grelmicro-sidecar\0run" in cmdline:
        return "sidecar"
    if b"grelmicro-sidecar\0injector" in cmdline:
        return "injector"
    if b"LEADER_ELECTION_STATE_FILE" in cmdline:
        return "app"
    if b"while True: pass" in cmdline:
        return "cpu load (bench.pods --cpu-load)"
    return "other"


def busy_seconds() -> float:
    """CPU time spent by the whole machine, in seconds (``/proc/stat``, all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


class CpuUse:
    """Samples every process's CPU time until ``stop``; ``usage`` says who used how much."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        #: (pid, start tick) -> [kind, started after the first sample, first seen, last seen]
        self.seen: dict[tuple[str, str], list[object]] = {}
        self._first = True
        self._busy = busy_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._first = False
            self._stop.wait(self.interval)
        self._sample()

    def _sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            rest = stat[stat.rindex(")") + 2 :].split()
            cpu = (int(rest[11]) + int(rest[12])) / TICK
            key = (entry.name, rest[19])
            found = self.seen.get(key)
            if found is None:
                # A process already running at the first sample is counted from there.
                self.seen[key] = [_kind(entry.name, comm), not self._first, cpu, cpu]
            else:
                found[3] = cpu

    def stop(self) -> dict[str, float]:
        """CPU seconds by kind since the start; a process started after it counts from 0."""
        self._stop.set()
        self._thread.join(5)
        usage: dict[str, float] = {}
        for kind, new, first, last in self.seen.values():
            assert isinstance(first, float) and isinstance(last, float)
            name = f"{kind} (started in the window)" if new and kind in ("sidecar", "app") else kind
            usage[str(name)] = usage.get(str(name), 0.0) + last - (0.0 if new else first)
        total = busy_seconds() - self._busy
        usage = {k: round(v, 2) for k, v in sorted(usage.items(), key=lambda kv: -kv[1]) if v}
        usage["unseen"] = round(total - sum(usage.values()), 2)
        usage["machine busy"] = round(total, 2)
        return usage
