"""Kernel settings a node changes, recorded before it starts and restored after it stops.

The kubelet sets ``vm.overcommit_memory``, ``kernel.panic`` and
``kernel.panic_on_oops``; the node itself needs ``net.ipv4.ip_forward`` for
Service traffic between pods. ``Snapshot`` records every sysctl under the
prefixes a node may touch, and ``restore`` writes back each one that differs,
so stopping a node leaves the kernel as it was.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

SYSCTL = Path("/proc/sys")

# Everything a kubelet, kube-proxy, containerd or the CNI bridge may write.
PREFIXES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all",
    "net/ipv4/conf/default",
    "net/ipv4/conf/lo",
    "net/ipv4/conf/eth0",
    "net/bridge",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "net/ipv4/vs",
    "net/ipv6/conf/all/forwarding",
)


def _files() -> list[Path]:
    out: list[Path] = []
    for prefix in PREFIXES:
        path = SYSCTL / prefix
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            out.append(path)
    return out


def read() -> dict[str, str]:
    """The current value of every recorded setting (unreadable ones are left out)."""
    values: dict[str, str] = {}
    for path in _files():
        with contextlib.suppress(OSError):
            values[str(path.relative_to(SYSCTL))] = path.read_text().strip()
    return values


@dataclass
class Snapshot:
    values: dict[str, str]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(read())

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.values, indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        return cls(json.loads(path.read_text()))

    def differences(self) -> dict[str, tuple[str, str]]:
        """Setting -> (recorded, now) for every setting that changed since the snapshot."""
        now = read()
        return {k: (v, now[k]) for k, v in self.values.items() if k in now and now[k] != v}

    def restore(self) -> dict[str, tuple[str, str]]:
        """Write back every changed setting; return what could not be restored."""
        for key, (old, _) in self.differences().items():
            with contextlib.suppress(OSError):
                (SYSCTL / key).write_text(old)
        return self.differences()


def write(key: str, value: str) -> None:
    (SYSCTL / key.replace(".", "/")).write_text(value)
