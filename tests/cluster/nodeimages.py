"""The node's own images, pause and CoreDNS, made from binaries built here.

No registry is reachable, so the pod sandbox image and CoreDNS's image are
written as OCI archives (``oci.py``) from the pause binary (compiled from the
Kubernetes module's ``build/pause/linux/pause.c``) and the CoreDNS binary, and
cached under ``<cache>/images`` keyed by the versions that made them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import binaries
from .oci import ImageConfig, ImageFile, write_archive

PAUSE_TAG = "3.10.2"  # what containerd 2.4 pins as its sandbox image
PAUSE_IMAGE = f"registry.k8s.io/pause:{PAUSE_TAG}"


@dataclass(frozen=True)
class ImageArchive:
    name: str
    path: Path


def _images_dir() -> Path:
    return binaries.cache_base() / "images"


def _kubernetes_source() -> Path:
    component = binaries.COMPONENTS["kubernetes"]
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", component.module],
        cwd=component.gomod_dir,
        env=dict(os.environ, GOFLAGS="-mod=mod"),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def pause() -> ImageArchive:
    version = binaries.COMPONENTS["kubernetes"].version()
    target = _images_dir() / f"pause-{PAUSE_TAG}-k8s-{version}.tar"

    def build(staging: Path) -> None:
        binary = staging / "pause"
        source = _kubernetes_source() / "build" / "pause" / "linux" / "pause.c"
        subprocess.run(
            [
                "gcc",
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{PAUSE_TAG}-grelmicro",
                "-o",
                str(binary),
                str(source),
            ],
            check=True,
        )
        subprocess.run(["strip", str(binary)], check=True)
        write_archive(
            staging / target.name,
            PAUSE_IMAGE,
            [ImageFile("pause", binary)],
            ImageConfig(entrypoint=("/pause",), user="65535:65535"),
        )

    return ImageArchive(PAUSE_IMAGE, _cached(target, build))


def coredns() -> ImageArchive:
    version = binaries.COMPONENTS["coredns"].version()
    name = f"registry.k8s.io/coredns/coredns:{version}"
    target = _images_dir() / f"coredns-{version}.tar"

    def build(staging: Path) -> None:
        binary = binaries.ensure("coredns")["coredns"]
        write_archive(
            staging / target.name,
            name,
            [ImageFile("coredns", binary)],
            ImageConfig(
                entrypoint=("/coredns",), user="65532:65532", exposed_ports=("53/udp", "53/tcp")
            ),
        )

    return ImageArchive(name, _cached(target, build))


BUSYBOX_IMAGE = "localhost/grelmicro-test/busybox:latest"
APPLETS = ("sh", "cat", "date", "echo", "grep", "httpd", "ip", "nc", "nslookup", "sleep", "wget")


def busybox() -> ImageArchive:
    """A shell, ``httpd``, ``wget`` and ``sleep`` in one static binary (Debian's busybox-static),
    for test pods that only need to run a command, serve a probe or share a file."""
    candidate = _apt_candidate("busybox-static")
    if not candidate:  # a fresh machine has no package lists yet
        with binaries.file_lock("apt"):  # one apt at a time (host.ensure_packages)
            subprocess.run(["apt-get", "update", "-qq"], check=True)
        candidate = _apt_candidate("busybox-static")
    if not candidate:
        raise RuntimeError("apt offers no busybox-static package: check the machine's apt sources")
    safe = candidate.replace(":", "_").replace("+", "_")
    target = _images_dir() / f"busybox-{safe}.tar"

    def build(staging: Path) -> None:
        subprocess.run(
            ["apt-get", "download", f"busybox-static={candidate}"],
            cwd=staging,
            check=True,
            capture_output=True,
        )
        deb = next(staging.glob("busybox-static_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(staging / "root")], check=True)
        write_archive(
            staging / target.name,
            BUSYBOX_IMAGE,
            [ImageFile("bin/busybox", staging / "root" / "bin" / "busybox")]
            + [ImageFile(f"bin/{a}", None, symlink_to="busybox") for a in APPLETS],
            ImageConfig(entrypoint=(), cmd=("/bin/sh",)),
        )

    return ImageArchive(BUSYBOX_IMAGE, _cached(target, build))


def _apt_candidate(package: str) -> str:
    policy = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True).stdout
    for line in policy.splitlines():
        if "Candidate:" in line:
            version = line.split(":", 1)[1].strip()
            return "" if version == "(none)" else version
    return ""


def _cached(target: Path, build: Callable[[Path], None]) -> Path:
    """One archive per key, built once (file-locked, published by rename)."""
    directory = target.with_suffix(".d")
    binaries.build_once(directory, ready=lambda d: (d / target.name).exists(), build=build)
    return directory / target.name


def node_images() -> list[ImageArchive]:
    """pause, CoreDNS (in that order) and busybox, the images every node gets."""
    return [pause(), coredns(), busybox()]
