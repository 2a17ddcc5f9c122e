"""The product's image built from its own Dockerfile, without a registry, for pods on the node.

No container registry is reachable, so the Dockerfile's ``FROM`` image is made
here from Debian packages: ``mmdebstrap`` builds a bookworm root filesystem
with Python 3.11 (what ``python:3.11-slim-bookworm`` holds, from the machine's
own apt sources), ``buildah`` loads it under that name, and ``buildah bud``
builds the Dockerfile exactly as ``docker build`` would. The examples' app
image (``curlimages/curl``) gets a stand-in the same way: Debian's curl
under that name.

Every archive is cached under ``<cache>/images`` keyed by a hash of what went
into it (the Dockerfile and the files it copies; the base's package list and
apt sources), so an unchanged tree never rebuilds. buildah's storage lives
in the cache too, never in ``/var/lib/containers``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from . import binaries, host
from .nodeimages import ImageArchive

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "grelmicro-sidecar"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
CURL_PACKAGES = ("curl", "ca-certificates")
CURL_IMAGE = "docker.io/curlimages/curl:8.11.1"
HOST_PACKAGES = {"mmdebstrap": "/usr/bin/mmdebstrap", "buildah": "/usr/bin/buildah"}


def _log(msg: str) -> None:
    print(f"[tests.cluster.images] {msg}", file=sys.stderr, flush=True)


def _images_dir() -> Path:
    return binaries.cache_base() / "images"


def _storage() -> list[str]:
    base = binaries.cache_base() / "buildah"
    return [f"--root={base / 'root'}", f"--runroot={base / 'runroot'}", "--storage-driver=vfs"]


def buildah(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["buildah", *_storage(), *args],
        check=True,
        capture_output=True,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def ensure_host_packages() -> None:
    host.ensure_packages(HOST_PACKAGES)


def apt_sources() -> Path:
    """The machine's own Debian sources (never a mirror written into the project)."""
    for candidate in (
        Path("/etc/apt/sources.list.d/debian.sources"),
        Path("/etc/apt/sources.list"),
    ):
        if candidate.exists() and candidate.read_text().strip():
            return candidate
    found = sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + sorted(
        Path("/etc/apt/sources.list.d").glob("*.list")
    )
    if not found:
        raise RuntimeError(
            "no apt sources on this machine: the image base is built from Debian packages"
        )
    return found[0]


def dockerfile_from() -> str:
    """The image name the Dockerfile builds from (its first ``FROM``)."""
    match = re.search(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    if not match:
        raise RuntimeError("Dockerfile has no FROM line")
    name = match.group(1)
    return name if "/" in name else f"docker.io/library/{name}"


def product_image_name() -> str:
    """The image the chart from the source tree installs by default, as a full reference.

    Its values' ``image.repository`` at its ``appVersion``: the name the product
    image is loaded into the node under, so a chart installed from the tree
    finds it there (``pullPolicy: IfNotPresent``) and never pulls.
    """
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return f"{full_reference(values['image']['repository'])}:{chart['appVersion']}"


def full_reference(repository: str) -> str:
    """``repository`` as containerd names it: Docker Hub's domain and ``library/`` made explicit."""
    first, _, rest = repository.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        repository = f"docker.io/{repository}"
        if not rest:
            repository = f"docker.io/library/{first}"
    return repository


def _context_files() -> list[Path]:
    """The files ``docker build .`` sends, per .dockerignore (the project's patterns only)."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    files = []
    for path in sorted(ROOT.rglob("*")):
        if not path.is_file() or ".git" in path.parts or ".venv" in path.parts:
            continue
        rel = path.relative_to(ROOT).as_posix()
        included = True
        for pattern in patterns:
            negate = pattern.startswith("!")
            pat = pattern.lstrip("!").rstrip("/")
            hit = (
                fnmatch.fnmatch(rel, pat)
                or rel.startswith(pat + "/")
                or fnmatch.fnmatch(rel, pat.replace("**/", "*/"))
            )
            if pat.startswith("**/"):
                hit = hit or fnmatch.fnmatch(Path(rel).name, pat[3:])
            if hit:
                included = negate
        if included:
            files.append(path)
    return files


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def _debian_image(
    name: str, packages: tuple[str, ...], env: dict[str, str], cmd: str
) -> ImageArchive:
    """A Debian bookworm root filesystem with ``packages``, loaded into buildah as ``name``."""
    key = _hash(name.encode(), " ".join(packages).encode(), apt_sources().read_bytes())
    archive = _images_dir() / f"debian-{key}.tar"

    def build(staging: Path) -> None:
        t0 = time.monotonic()
        rootfs = staging / "rootfs.tar"
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "bookworm",
                str(rootfs),
                str(apt_sources()),
            ],
            check=True,
            capture_output=True,
        )
        container = buildah("from", "scratch").stdout.strip()
        try:
            buildah("add", container, str(rootfs), "/")
            for k, v in env.items():
                buildah("config", "--env", f"{k}={v}", container)
            buildah("config", "--cmd", cmd, container)
            buildah("commit", "--quiet", container, name)
        finally:
            buildah("rm", container)
        buildah("push", name, f"docker-archive:{staging / archive.name}:{name}")
        rootfs.unlink()
        _log(f"built {name} from Debian packages in {time.monotonic() - t0:.1f}s")

    directory = archive.with_suffix(".d")
    binaries.build_once(directory, ready=lambda d: (d / archive.name).exists(), build=build)
    _load(name, directory / archive.name)
    return ImageArchive(name, directory / archive.name)


def _load(name: str, archive: Path) -> None:
    """Make ``name`` known to buildah (a fresh cache may have the archive but not the storage)."""
    if (
        subprocess.run(["buildah", *_storage(), "inspect", name], capture_output=True).returncode
        != 0
    ):
        buildah("pull", "--quiet", f"docker-archive:{archive}")


def python_base() -> ImageArchive:
    """What the Dockerfile's FROM names, from Debian's Python 3.11."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
    }
    return _debian_image(dockerfile_from(), BASE_PACKAGES, env, "python3")


def curl_standin() -> ImageArchive:
    """The examples' app image, ``curlimages/curl``, stood in for by Debian's curl."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    return _debian_image(CURL_IMAGE, CURL_PACKAGES, env, "curl")


def product() -> ImageArchive:
    """The Dockerfile built as ``docker build`` would, cached by the hash of its inputs."""
    files = {f.relative_to(ROOT).as_posix(): f for f in _context_files()}
    return dockerfile_image(
        product_image_name(), "grelmicro-sidecar", files, (ROOT / "Dockerfile").read_text()
    )


def dockerfile_image(name: str, stem: str, files: dict[str, Path], dockerfile: str) -> ImageArchive:
    """``dockerfile`` built with ``files`` as its context (path inside the context -> source).

    Its ``FROM`` must be the Python base (``python_base``), the one base this
    machine can make; cached under ``<stem>-<hash of every input and the name>.tar``.
    """
    base = python_base()
    key = _hash(
        base.path.name.encode(),
        *(rel.encode() + b"\0" + files[rel].read_bytes() for rel in sorted(files)),
        dockerfile.encode(),
        name.encode(),  # the archive loads under it, and it follows the chart's values
    )
    archive = _images_dir() / f"{stem}-{key}.tar"

    def build(staging: Path) -> None:
        t0 = time.monotonic()
        built = _bud(staging, name, files, dockerfile)
        buildah("push", built, f"docker-archive:{staging / archive.name}:{name}")
        # The archive is what nodes load; buildah's copy (vfs: the whole image again, every
        # time the tree changes) is of no further use.
        subprocess.run(["buildah", *_storage(), "rmi", built], capture_output=True)
        _log(f"built {name} from its Dockerfile in {time.monotonic() - t0:.1f}s")

    directory = archive.with_suffix(".d")
    binaries.build_once(directory, ready=lambda d: (d / archive.name).exists(), build=build)
    return ImageArchive(name, directory / archive.name)


def _bud(
    staging: Path,
    name: str,
    files: dict[str, Path],
    dockerfile: str,
    extra: tuple[str, ...] = (),
) -> str:
    """``buildah bud`` of ``dockerfile`` over ``files`` (copied into ``staging``), with ``extra``
    arguments; the image ID."""
    context = staging / "context"
    for rel, source in files.items():
        target = context / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (context / "Dockerfile").write_text(dockerfile)
    mounts = []
    # pip inside the build trusts what the machine's own pip trusts.
    for path in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf"):
        if Path(path).exists():
            mounts += ["--volume", f"{path}:{path}:ro"]
    buildah(
        "bud",
        "--quiet",
        "--isolation=chroot",
        "--pull-never",
        "--layers=false",
        *mounts,
        *extra,
        "--iidfile",
        str(staging / "iid"),
        "--tag",
        name,
        str(context),
    )
    shutil.rmtree(context)
    return (staging / "iid").read_text().strip()


def release_image(name: str, labels: dict[str, str], timestamp: int) -> ImageArchive:
    """The product image as a release ships it: an OCI archive (layers gzip-compressed, as a
    registry serves them) whose manifest a push keeps byte for byte, so its digest is the one
    nodes pull by. The Dockerfile as ``product()`` builds it, plus ``labels``, created at
    ``timestamp`` (seconds; its files' times too) and without the base annotations: its
    base is the Debian-made stand-in, which no registry serves under the name the
    Dockerfile gives. Cached by the hash of every input, so one tree gives one digest."""
    ensure_host_packages()
    files = {f.relative_to(ROOT).as_posix(): f for f in _context_files()}
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = python_base()
    extra = [f"--timestamp={timestamp}"]
    for key in ("org.opencontainers.image.base.name", "org.opencontainers.image.base.digest"):
        extra += ["--annotation", f"{key}="]
    for key, value in labels.items():
        extra += ["--label", f"{key}={value}"]
    key = _hash(
        base.path.name.encode(),
        *(rel.encode() + b"\0" + files[rel].read_bytes() for rel in sorted(files)),
        dockerfile.encode(),
        "\0".join(extra).encode(),
        name.encode(),
    )
    archive = _images_dir() / f"release-{key}.oci.tar"

    def build(staging: Path) -> None:
        t0 = time.monotonic()
        built = _bud(staging, name, files, dockerfile, tuple(extra))
        tag = name.rsplit(":", 1)[1]
        buildah("push", built, f"oci-archive:{staging / archive.name}:{tag}")
        subprocess.run(["buildah", *_storage(), "rmi", built], capture_output=True)
        _log(f"built {name} for release in {time.monotonic() - t0:.1f}s")

    directory = archive.parent / f"release-{key}.d"
    binaries.build_once(directory, ready=lambda d: (d / archive.name).exists(), build=build)
    return ImageArchive(name, directory / archive.name)


def product_images() -> list[ImageArchive]:
    """What a node needs to run the chart and the examples: the product image and the app stand-in."""
    ensure_host_packages()
    return [product(), curl_standin()]


def image_size(archive: ImageArchive) -> int:
    """The image's size in bytes: its docker-archive holds each layer uncompressed, once."""
    return archive.path.stat().st_size
