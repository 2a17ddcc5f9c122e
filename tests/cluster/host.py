"""Whether this machine can run a node, and the Debian packages the node needs.

A node changes machine-wide state (a bridge, nftables, sysctls, cgroups), so
it needs root and a few kernel features. ``unsupported_reason`` answers in
one line why a node cannot run here, or ``None``; node tests skip with that
line, except under ``CI=true`` where it is a failure (CI machines must run it).
``ensure_packages`` installs what is missing with apt, and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# Debian package -> a file that shows it is installed.
PACKAGES = {
    "iptables": "/usr/sbin/iptables",
    "nftables": "/usr/sbin/nft",
    "conntrack": "/usr/sbin/conntrack",
    "libseccomp-dev": "/usr/include/seccomp.h",  # runc is built with seccomp
    "iproute2": "/usr/sbin/ip",
    "mount": "/usr/bin/mount",
}


def unsupported_reason() -> str | None:
    """One line saying why a node cannot run on this machine, or None when it can."""
    if sys.platform != "linux":
        return "a node needs Linux"
    if os.geteuid() != 0:
        return "a node needs root (it creates a bridge, nftables rules and cgroups)"
    cgroup = Path("/sys/fs/cgroup")
    if not (cgroup / "cgroup.controllers").exists() and not (cgroup / "memory").is_dir():
        return "a node needs cgroups mounted at /sys/fs/cgroup"
    if not Path("/proc/sys/net/ipv4/ip_forward").exists():
        return "a node needs IPv4 networking (/proc/sys/net/ipv4/ip_forward is missing)"
    if shutil.which("apt-get") is None and any(not Path(p).exists() for p in PACKAGES.values()):
        missing = [n for n, p in PACKAGES.items() if not Path(p).exists()]
        return (
            f"a node needs these Debian packages and apt-get is not available: {', '.join(missing)}"
        )
    if shutil.which("gcc") is None:
        return "a node needs gcc (the pause binary and runc are compiled here)"
    return None


def ensure_packages(packages: dict[str, str] = PACKAGES) -> None:
    """Install the Debian packages (the node's by default) that are missing (apt-get, quietly).

    One apt at a time on this machine (a file lock): apt refuses at once, rather than
    waiting, when another session's apt-get holds its lock.
    """
    from .binaries import file_lock

    if all(Path(path).exists() for path in packages.values()):
        return
    with file_lock("apt"):
        missing = [name for name, path in packages.items() if not Path(path).exists()]
        if not missing:
            return
        print(
            f"[tests.cluster] installing {' '.join(missing)} with apt-get ...",
            file=sys.stderr,
            flush=True,
        )
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            check=True,
            env=env,
        )
