"""OCI image archives written with the standard library, for images made of a few files.

The node needs two images no registry can give it here: the pod sandbox
(``pause``) and CoreDNS. Each is a static binary, so one layer holding a few
files is the whole image. ``write_archive`` produces an OCI image layout as a
tar (``oci-layout``, ``index.json``, blobs) that ``ctr images import`` loads
under the name in the ``io.containerd.image.name`` annotation.

Guarantees: the archive is reproducible (fixed mtimes, owners and ordering),
so the same inputs give the same bytes and the same image digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ImageFile:
    """One file of the image's single layer."""

    path: str  # inside the image, without a leading slash
    source: Path | None  # the file's content (None for a symlink)
    mode: int = 0o755
    symlink_to: str = ""  # make ``path`` a symlink to this target instead


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config the node's images need."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    exposed_ports: tuple[str, ...] = field(default_factory=tuple)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: list[ImageFile]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for f in sorted(files, key=lambda f: f.path):
            parts = f.path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(f.path.strip("/"))
            if f.symlink_to:
                info.type = tarfile.SYMTYPE
                info.linkname = f.symlink_to
                tar.addfile(info)
                continue
            assert f.source is not None, f"{f.path} needs a source or a symlink target"
            data = f.source.read_bytes()
            info.size = len(data)
            info.mode = f.mode
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_archive(dest: Path, name: str, files: list[ImageFile], config: ImageConfig) -> str:
    """Write an OCI layout tar for image ``name`` to ``dest``; return the manifest digest."""
    layer_tar = _layer(files)
    layer_gz = gzip.compress(layer_tar, mtime=0)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "User": config.user,
            "Env": list(config.env),
            "ExposedPorts": {p: {} for p in config.exposed_ports} or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _digest(config_blob),
            "size": len(config_blob),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": _digest(layer_gz),
                "size": len(layer_gz),
            }
        ],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _digest(manifest_blob),
                "size": len(manifest_blob),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for blob in (config_blob, layer_gz, manifest_blob):
            _add(tar, "blobs/sha256/" + _digest(blob).split(":", 1)[1], blob)
    tmp.rename(dest)
    return _digest(manifest_blob)
