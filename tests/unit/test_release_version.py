"""One version per release, and what make release refuses (hack/release.py), in-process.

The version lives in sidecar/__init__.py; the package reads it (pyproject's
dynamic version), the chart must say the same, the CHANGELOG must have its
entry, and a tag must name it with a dated entry. The release build itself
(image, chart, SBOM) is tests/ship/test_release.py.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

import sidecar
from hack import release

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "grelmicro-sidecar"
DIGEST = "sha256:" + "ab" * 32


def test_one_version_everywhere() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sidecar.__version__"}
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert release.version() == sidecar.__version__
    assert (chart["version"], chart["appVersion"]) == (sidecar.__version__, sidecar.__version__)
    assert release.check_versions() == sidecar.__version__
    assert release.changelog_date(sidecar.__version__) in ("Unreleased",) or re.fullmatch(
        r"\d{4}-\d{2}-\d{2}", release.changelog_date(sidecar.__version__)
    )


def test_license_is_mit_everywhere_it_is_stated() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert pyproject["license"] == "MIT" and pyproject["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert 'org.opencontainers.image.licenses="MIT"' in (ROOT / "Dockerfile").read_text()
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert requires == ["setuptools>=77"]  # PEP 639: License-Expression, License-File


def test_changelog_is_keep_a_changelog_with_a_link_per_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    entries = re.findall(r"^## \[([^\]]+)\] - (\S+)$", text, re.M)
    assert entries and entries[0][0] == sidecar.__version__
    for version, date in entries:
        assert date == "Unreleased" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), (version, date)
        assert re.search(rf"^\[{re.escape(version)}\]: https://\S+$", text, re.M), version
    assert release.changelog_notes(sidecar.__version__).startswith("The first release.")


def _tree(tmp_path: Path, *, chart_version: str = "", date: str = "Unreleased") -> Path:
    """A copy of what hack/release.py reads, with the chart's version or the entry's date changed."""
    (tmp_path / "sidecar").mkdir(exist_ok=True)
    shutil.copy(ROOT / "sidecar" / "__init__.py", tmp_path / "sidecar" / "__init__.py")
    chart = tmp_path / "charts" / "grelmicro-sidecar"
    chart.mkdir(parents=True, exist_ok=True)
    text = (CHART / "Chart.yaml").read_text()
    if chart_version:
        text = re.sub(r"^version: .*$", f"version: {chart_version}", text, flags=re.M)
    (chart / "Chart.yaml").write_text(text)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    changelog = changelog.replace(
        f"## [{sidecar.__version__}] - Unreleased", f"## [{sidecar.__version__}] - {date}"
    )
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    return tmp_path


@pytest.fixture
def tree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(**kwargs: str) -> None:
        root = _tree(tmp_path, **kwargs)
        monkeypatch.setattr(release, "ROOT", root)
        monkeypatch.setattr(release, "CHART", root / "charts" / "grelmicro-sidecar")

    return make


def test_a_chart_of_another_version_is_refused_in_one_line(
    tree, capsys: pytest.CaptureFixture[str]
) -> None:
    tree(chart_version="9.9.9")
    assert release.main(["version"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "release: charts/grelmicro-sidecar/Chart.yaml version is 9.9.9, but sidecar/__init__.py "
        f"says {sidecar.__version__}: a release has one version\n"
    )


def test_a_tag_must_name_the_version_and_its_entry_must_be_dated(
    tree, capsys: pytest.CaptureFixture[str]
) -> None:
    v = sidecar.__version__
    tree()
    assert release.main(["check-tag", f"v{v}"]) == 2
    assert "write the release day (YYYY-MM-DD)" in capsys.readouterr().err
    tree(date="2026-12-01")
    assert release.main(["check-tag", "v9.9.9"]) == 2
    assert (
        capsys.readouterr().err == f"release: tag v9.9.9 does not name this tree's version (v{v})\n"
    )
    assert release.main(["check-tag", f"v{v}"]) == 0
    assert capsys.readouterr().out == f"{v}\n"


def test_the_released_chart_pins_the_image_digest_and_nothing_else() -> None:
    values = (CHART / "values.yaml").read_text()
    assert yaml.safe_load(values)["image"]["digest"] == ""
    pinned = release.set_digest(values, DIGEST)
    before, after = yaml.safe_load(values), yaml.safe_load(pinned)
    assert after["image"]["digest"] == DIGEST
    after["image"]["digest"] = ""
    assert after == before  # the sidecar's image and every other value unchanged
    assert [a for a, b in zip(values.splitlines(), pinned.splitlines(), strict=True) if a != b] == [
        '  digest: ""'
    ]
    with pytest.raises(release.ReleaseError, match=r"no image\.digest"):
        release.set_digest(values.replace('  digest: ""\n', ""), DIGEST)


def test_the_schema_takes_a_digest_or_nothing() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    pattern = re.compile(schema["properties"]["image"]["properties"]["digest"]["pattern"])
    assert pattern.fullmatch(DIGEST) and pattern.fullmatch("")
    for bad in ("latest", "sha256:abc", DIGEST.upper(), "@" + DIGEST):
        assert not pattern.fullmatch(bad), bad
