"""A release built from one version: ``make release`` (``python -m hack.release build``).

The version is ``__version__`` in ``sidecar/__init__.py``; setuptools reads it
for the package, and everything else is made from it or refused when it
disagrees: the chart's ``version`` and ``appVersion`` (checked, then passed to
``helm package``), the image's ``org.opencontainers.image.version`` label and
tag (given to ``buildah bud``), and the CHANGELOG entry (checked).

Into ``dist/`` (or ``--dist``), each named after the version:

- the wheel and the sdist (``python -m build``: the wheel is built from the sdist);
- ``grelmicro-sidecar-V.oci.tar``: the image, built from the Dockerfile with
  buildah (``tests/cluster/images.py``), an OCI archive whose manifest a push
  keeps byte for byte, and ``grelmicro-sidecar-V.image-digest``: that
  manifest's digest, the one nodes pull by;
- ``grelmicro-sidecar-V.tgz``: the chart, its ``image.digest`` set to that digest;
- ``grelmicro-sidecar-V.sbom.cdx.json``: the image's CycloneDX SBOM, by syft
  (built from the Go module proxy), with the Debian and the Python packages;
- ``SHA256SUMS`` over all of the above (``sha256sum --check`` reads it).

``check-tag vX.Y.Z`` (the release workflow) refuses a tag that is not this
version or whose CHANGELOG entry is still ``Unreleased``; ``notes`` prints the
entry, the GitHub release's text. Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "grelmicro-sidecar"
NAME = "grelmicro-sidecar"
#: Where a release is published (CONTEXT: the project's home is github.com/grelinfo).
REGISTRY = "ghcr.io/grelinfo"
IMAGE = f"{REGISTRY}/{NAME}"
SOURCE = "https://github.com/grelinfo/grelmicro-sidecar"
DATED = re.compile(r"\d{4}-\d{2}-\d{2}")


class ReleaseError(Exception):
    """Something a release cannot be built from; the message names what to fix."""


def version() -> str:
    """``__version__`` from ``sidecar/__init__.py``, read without importing the package."""
    text = (ROOT / "sidecar" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not match:
        raise ReleaseError('sidecar/__init__.py has no line __version__ = "X.Y.Z"')
    return match.group(1)


def chart_versions() -> tuple[str, str]:
    """(version, appVersion) of the chart in the tree."""
    text = (CHART / "Chart.yaml").read_text()
    found = {
        key: re.search(rf'^{key}:\s*"?([^"\s]+)"?\s*$', text, re.M)
        for key in ("version", "appVersion")
    }
    missing = [k for k, m in found.items() if m is None]
    if missing:
        raise ReleaseError(f"charts/grelmicro-sidecar/Chart.yaml has no {missing[0]}")
    return found["version"].group(1), found["appVersion"].group(1)  # type: ignore[union-attr]


def changelog_date(wanted: str) -> str:
    """The date of ``wanted``'s CHANGELOG entry (``## [V] - DATE``): a day or ``Unreleased``."""
    text = (ROOT / "CHANGELOG.md").read_text()
    match = re.search(rf"^## \[{re.escape(wanted)}\] - (\S+)\s*$", text, re.M)
    if not match:
        raise ReleaseError(f"CHANGELOG.md has no entry '## [{wanted}] - Unreleased' (or dated)")
    return match.group(1)


def changelog_notes(wanted: str) -> str:
    """The body of ``wanted``'s CHANGELOG entry."""
    changelog_date(wanted)
    text = (ROOT / "CHANGELOG.md").read_text()
    body = re.split(rf"^## \[{re.escape(wanted)}\][^\n]*\n", text, maxsplit=1, flags=re.M)[1]
    return re.split(r"^(?:## |\[)", body, maxsplit=1, flags=re.M)[0].strip() + "\n"


def check_versions() -> str:
    """The one version, once the chart and the CHANGELOG agree with it."""
    wanted = version()
    chart, app = chart_versions()
    for what, value in (("version", chart), ("appVersion", app)):
        if value != wanted:
            raise ReleaseError(
                f"charts/grelmicro-sidecar/Chart.yaml {what} is {value}, but sidecar/__init__.py "
                f"says {wanted}: a release has one version"
            )
    changelog_date(wanted)
    return wanted


def check_tag(tag: str) -> str:
    wanted = check_versions()
    if tag != f"v{wanted}":
        raise ReleaseError(f"tag {tag} does not name this tree's version (v{wanted})")
    date = changelog_date(wanted)
    if not DATED.fullmatch(date):
        raise ReleaseError(
            f"CHANGELOG.md dates {wanted} '{date}': write the release day (YYYY-MM-DD)"
        )
    return wanted


# ---- building -------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _revision() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def _source_date_epoch() -> str:
    """The last commit's time, so the package archives carry no build-time timestamps."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "315532800"


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int  # compressed, as a registry stores and a node downloads it


def oci_manifest(archive: Path) -> tuple[str, dict[str, object]]:
    """(manifest digest, manifest) of the one image in an OCI archive."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        [entry] = index["manifests"]
        digest = entry["digest"]
        blob = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
        raw = blob.read()  # type: ignore[union-attr]
    if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
        raise ReleaseError(f"{archive.name}: its manifest does not match its digest {digest}")
    return digest, json.loads(raw)


def oci_config(archive: Path) -> dict[str, object]:
    """The image config (labels, user, entrypoint) of the one image in an OCI archive."""
    _, manifest = oci_manifest(archive)
    config = manifest["config"]["digest"]  # type: ignore[index]
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("blobs/sha256/" + config.split(":", 1)[1]))  # type: ignore[arg-type]


def layers(archive: Path) -> list[Layer]:
    _, manifest = oci_manifest(archive)
    return [Layer(item["digest"], item["size"]) for item in manifest["layers"]]  # type: ignore[attr-defined]


def build_packages(dist: Path) -> list[Path]:
    t0 = time.monotonic()
    env = dict(os.environ, SOURCE_DATE_EPOCH=_source_date_epoch())
    with tempfile.TemporaryDirectory(prefix="release-packages-") as out:
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", out, str(ROOT)],
            check=True,
            capture_output=True,
            env=env,
        )
        made = []
        for path in sorted(Path(out).iterdir()):
            made.append(Path(shutil.move(path, dist / path.name)))
    _log(f"wheel and sdist in {time.monotonic() - t0:.1f}s")
    return made


def build_image(dist: Path, wanted: str) -> tuple[Path, str]:
    from tests.cluster import images

    t0 = time.monotonic()
    labels = {
        "org.opencontainers.image.version": wanted,
        "org.opencontainers.image.source": SOURCE,
    }
    revision = _revision()
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    built = images.release_image(f"{IMAGE}:{wanted}", labels, int(_source_date_epoch()))
    archive = dist / f"{NAME}-{wanted}.oci.tar"
    shutil.copyfile(built.path, archive)
    digest, _ = oci_manifest(archive)
    (dist / f"{NAME}-{wanted}.image-digest").write_text(digest + "\n")
    _log(f"image {IMAGE}@{digest} in {time.monotonic() - t0:.1f}s")
    return archive, digest


def build_sbom(dist: Path, archive: Path, wanted: str) -> Path:
    from tests.cluster import binaries

    syft = binaries.ensure("syft")["syft"]
    t0 = time.monotonic()
    out = dist / f"{NAME}-{wanted}.sbom.cdx.json"
    env = dict(
        os.environ,
        SYFT_CHECK_FOR_APP_UPDATE="false",
        # Packages only: the files each one owns would add 5,600 components (1.9 MB, not 0.3).
        SYFT_FILE_METADATA_SELECTION="none",
        SYFT_CACHE_DIR=str(binaries.cache_base() / "syft-cache"),
    )
    subprocess.run(
        [
            str(syft),
            "scan",
            f"oci-archive:{archive}",
            "--quiet",
            f"--source-name={IMAGE}",
            f"--source-version={wanted}",
            "--output",
            f"cyclonedx-json={out}",
        ],
        check=True,
        env=env,
    )
    _log(f"SBOM in {time.monotonic() - t0:.1f}s")
    return out


def set_digest(values: str, digest: str) -> str:
    """values.yaml with ``image.digest`` set: the one line ``  digest: ""`` of the ``image:`` block."""
    block = re.search(r"^image:\n(?:(?:  .*|\s*|#.*)\n)+", values, re.M)
    if block is None or block.group(0).count('\n  digest: ""\n') != 1:
        raise ReleaseError('charts/grelmicro-sidecar/values.yaml has no image.digest: "" to set')
    start, end = block.span()
    return (
        values[:start]
        + block.group(0).replace('\n  digest: ""\n', f'\n  digest: "{digest}"\n')
        + values[end:]
    )


def build_chart(dist: Path, wanted: str, digest: str) -> Path:
    from tests.cluster import binaries

    helm = binaries.ensure("helm")["helm"]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="release-chart-") as tmp:
        chart = Path(tmp) / NAME
        shutil.copytree(CHART, chart)
        values = chart / "values.yaml"
        values.write_text(set_digest(values.read_text(), digest))
        env = dict(os.environ, HELM_CACHE_HOME=tmp, HELM_CONFIG_HOME=tmp, HELM_DATA_HOME=tmp)
        subprocess.run(
            [
                str(helm),
                "package",
                str(chart),
                f"--version={wanted}",
                f"--app-version={wanted}",
                f"--destination={dist}",
            ],
            check=True,
            capture_output=True,
            env=env,
        )
    out = dist / f"{NAME}-{wanted}.tgz"
    _log(f"chart in {time.monotonic() - t0:.1f}s")
    return out


def write_sums(dist: Path) -> Path:
    sums = dist / "SHA256SUMS"
    lines = [f"{sha256(p)}  {p.name}\n" for p in sorted(dist.iterdir()) if p.name != sums.name]
    sums.write_text("".join(lines))
    return sums


def build(dist: Path) -> None:
    started = time.monotonic()
    wanted = check_versions()
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    build_packages(dist)
    archive, digest = build_image(dist, wanted)
    build_sbom(dist, archive, wanted)
    build_chart(dist, wanted, digest)
    write_sums(dist)
    print(f"release {wanted} in {dist} ({time.monotonic() - started:.0f}s):")
    for path in sorted(dist.iterdir()):
        print(f"  {path.stat().st_size / 1e6:9.2f} MB  {path.name}")
    found = layers(archive)
    sizes = ", ".join(f"{layer.size / 1e6:.1f}" for layer in found)
    print(f"  image {IMAGE}:{wanted}@{digest}: {len(found)} layers ({sizes} MB compressed)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.release")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build every release artifact into --dist")
    b.add_argument("--dist", type=Path, default=ROOT / "dist")
    t = sub.add_parser("check-tag", help="refuse a tag that is not this version, or undated")
    t.add_argument("tag")
    sub.add_parser("version", help="print the version")
    n = sub.add_parser("notes", help="print the CHANGELOG entry of the version")
    n.add_argument("--version", dest="wanted", default="")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.dist.resolve())
        elif args.command == "check-tag":
            print(check_tag(args.tag))
        elif args.command == "version":
            print(check_versions())
        else:
            sys.stdout.write(changelog_notes(args.wanted or version()))
    except ReleaseError as err:
        print(f"release: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
