"""What ``make release`` puts in dist/, built for real once per session (``released``).

Every artifact is there and named after the one version; SHA256SUMS verifies;
the image digest file is the OCI archive's manifest digest (recomputed from the
manifest's bytes); the image carries the version label; the chart's version,
appVersion and pinned digest agree with it; the SBOM lists the sidecar's Python
dependencies and the Debian packages under them; the wheel and the sdist carry
the license (PEP 639 metadata and the file). Sizes and layers are printed.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
import yaml

import sidecar
from hack import release
from tests.ship.tools import helm

V = sidecar.__version__
NAME = "grelmicro-sidecar"
ARTIFACTS = {
    f"grelmicro_sidecar-{V}-py3-none-any.whl",
    f"grelmicro_sidecar-{V}.tar.gz",
    f"{NAME}-{V}.oci.tar",
    f"{NAME}-{V}.image-digest",
    f"{NAME}-{V}.tgz",
    f"{NAME}-{V}.sbom.cdx.json",
    "SHA256SUMS",
}

pytestmark = pytest.mark.timeout(3600)  # the session's make release may build syft and the image


def test_every_artifact_is_there_and_named_after_the_version(released: Path) -> None:
    assert {p.name for p in released.iterdir()} == ARTIFACTS
    print("\nrelease artifacts:")
    for path in sorted(released.iterdir()):
        print(f"  {path.stat().st_size:>12,} B  {path.name}")


def test_sha256sums_verify_every_artifact(released: Path) -> None:
    done = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=released,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = {line.split("  ", 1)[1] for line in (released / "SHA256SUMS").read_text().splitlines()}
    assert listed == ARTIFACTS - {"SHA256SUMS"}


def _commit_day() -> str:
    out = subprocess.run(
        [
            "git",
            "-C",
            str(release.ROOT),
            "log",
            "-1",
            "--format=%cd",
            "--date=format-local:%Y-%m-%d",
        ],
        capture_output=True,
        text=True,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    )
    return out.stdout.strip()


def test_the_image_is_the_version_and_its_digest_file_names_its_manifest(released: Path) -> None:
    archive = released / f"{NAME}-{V}.oci.tar"
    digest = (released / f"{NAME}-{V}.image-digest").read_text()
    manifest_digest, manifest = release.oci_manifest(archive)  # recomputed from the bytes
    assert digest == manifest_digest + "\n"
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == V
    config: dict[str, Any] = release.oci_config(archive)
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == V
    assert labels["org.opencontainers.image.licenses"] == "MIT"
    assert labels["org.opencontainers.image.source"] == release.SOURCE
    assert config["config"]["User"] == "65532:65532"
    # Created at the last commit's time, and no claim of a registry base it was not built on.
    assert config["created"].startswith(_commit_day())
    annotations: dict[str, str] = manifest.get("annotations") or {}  # type: ignore[assignment]
    assert not annotations.get("org.opencontainers.image.base.name"), annotations
    layers = release.layers(archive)
    assert all(
        item["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        for item in manifest["layers"]  # type: ignore[attr-defined]
    )
    print(
        f"\nimage {release.IMAGE}:{V}@{manifest_digest}: {len(layers)} layers, "
        + ", ".join(f"{layer.size / 1e6:.1f} MB" for layer in layers)
        + f" compressed ({sum(layer.size for layer in layers) / 1e6:.1f} MB)"
    )


def test_the_chart_is_the_version_and_pins_the_image_by_digest(released: Path) -> None:
    chart = released / f"{NAME}-{V}.tgz"
    shown = yaml.safe_load(helm("show", "chart", str(chart)).stdout)
    assert (shown["name"], shown["version"], shown["appVersion"]) == (NAME, V, V)
    values = yaml.safe_load(helm("show", "values", str(chart)).stdout)
    digest = (released / f"{NAME}-{V}.image-digest").read_text().strip()
    assert values["image"]["digest"] == digest
    assert values["image"]["tag"] in ("", V)
    # Everything else is the tree's chart as it is.
    with tarfile.open(chart) as tar:
        packed = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    tree = release.CHART
    assert packed == {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}, (
        "the packaged chart holds other files than the tree's chart"
    )


def _components(sbom: dict[str, Any]) -> dict[str, set[str]]:
    """{purl type: names} of the SBOM's components."""
    out: dict[str, set[str]] = {}
    for component in sbom.get("components", []):
        purl = component.get("purl", "")
        if purl.startswith("pkg:"):
            kind = purl[4:].split("/", 1)[0]
            out.setdefault(kind, set()).add(component["name"].lower())
    return out


def test_the_sbom_lists_the_python_dependencies_and_the_debian_packages(released: Path) -> None:
    sbom = json.loads((released / f"{NAME}-{V}.sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["name"] == release.IMAGE
    assert sbom["metadata"]["component"]["version"] == V
    found = _components(sbom)
    python = found.get("pypi", set())
    # The package itself, what `run` needs and what the injector's extra brings.
    assert {"grelmicro-sidecar", "h11", "pyyaml", "kopf", "aiohttp"} <= python, sorted(python)
    debian = found.get("deb", set())
    assert {"libc6", "python3.11", "ca-certificates"} <= debian, sorted(debian)
    print(f"\nSBOM: {len(python)} Python packages, {len(debian)} Debian packages")


def test_the_wheel_and_the_sdist_carry_the_license(released: Path) -> None:
    with zipfile.ZipFile(released / f"grelmicro_sidecar-{V}-py3-none-any.whl") as wheel:
        metadata = Parser().parsestr(
            wheel.read(f"grelmicro_sidecar-{V}.dist-info/METADATA").decode()
        )
        license_text = wheel.read(f"grelmicro_sidecar-{V}.dist-info/licenses/LICENSE").decode()
    assert metadata["Metadata-Version"] == "2.4"
    assert metadata["Version"] == V
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert license_text == (release.ROOT / "LICENSE").read_text()
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    with tarfile.open(released / f"grelmicro_sidecar-{V}.tar.gz") as sdist:
        names = set(sdist.getnames())
        assert f"grelmicro_sidecar-{V}/LICENSE" in names
        pkg_info = sdist.extractfile(f"grelmicro_sidecar-{V}/PKG-INFO").read().decode()  # type: ignore[union-attr]
    assert "License-Expression: MIT" in pkg_info
