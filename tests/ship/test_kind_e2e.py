"""hack/kind-e2e.sh cannot run here (no Docker engine): it is linted, and its refusals are real.

Fake ``kind``, ``kubectl`` and ``helm`` on PATH record any call: a refusal must
come before the script touches anything.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster import images
from tests.ship.tools import BIN, ROOT

pytestmark = pytest.mark.timeout(60)
SCRIPT = ROOT / "hack" / "kind-e2e.sh"


def test_script_is_shellcheck_clean_and_executable() -> None:
    shellcheck = BIN / "shellcheck"
    assert shellcheck.exists(), (
        f"shellcheck is missing from {BIN}: install the test extra (pip install -e '.[test]')"
    )
    result = subprocess.run(
        [str(shellcheck), "--severity=style", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.access(SCRIPT, os.X_OK)
    assert "kind-e2e:\n\thack/kind-e2e.sh" in (ROOT / "Makefile").read_text()


def test_script_runs_the_e2e_suite_on_the_kind_cluster() -> None:
    text = SCRIPT.read_text()
    assert 'E2E_KUBECONFIG="$kubeconfig"' in text and '"$ROOT/tests/e2e"' in text
    assert (ROOT / "tests" / "e2e" / "conftest.py").read_text().count("E2E_KUBECONFIG") >= 1
    assert 'kind load docker-image "$IMAGE"' in text


def test_script_loads_the_image_the_chart_installs_by_default() -> None:
    """The name it builds and loads is the chart's default, as the node's preload is
    (``images.product_image_name``): the script's own lines, run by bash."""
    lines = [
        line
        for line in SCRIPT.read_text().splitlines()
        if line.startswith(("VERSION=", "REPOSITORY=", "IMAGE="))
    ]
    assert len(lines) == 3, lines
    result = subprocess.run(
        ["bash", "-c", "\n".join([f"ROOT={ROOT}", *lines, 'printf %s "$IMAGE"'])],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    repository, _, tag = result.stdout.rpartition(":")
    assert f"{images.full_reference(repository)}:{tag}" == images.product_image_name()


def _fake_bin(tmp_path: Path, docker_info_ok: bool | None) -> tuple[Path, Path]:
    """A PATH folder with recording fakes; docker_info_ok None: no docker at all."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.log"
    tools = ["kind", "kubectl", "helm"] + ([] if docker_info_ok is None else ["docker"])
    for tool in tools:
        exit_code = 1 if tool == "docker" and not docker_info_ok else 0
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\nexit {exit_code}\n')
        (bindir / tool).chmod(0o755)
    return bindir, calls


def _run(bindir: Path) -> subprocess.CompletedProcess[str]:
    # Only the fakes and the basic system tools: not the real docker of this machine.
    path = f"{bindir}:/usr/bin:/bin"
    return subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": path, "HOME": str(bindir)},
    )


def test_refuses_clearly_without_docker(tmp_path: Path) -> None:
    for candidate in ("/usr/bin/docker", "/bin/docker"):
        if Path(candidate).exists():
            pytest.fail(f"{candidate} exists: this test needs a PATH without docker")
    bindir, calls = _fake_bin(tmp_path, docker_info_ok=None)
    result = _run(bindir)
    assert result.returncode == 1
    assert "kind-e2e: docker is not installed" in result.stderr
    assert "make demo" in result.stderr
    assert not calls.exists(), calls.read_text()


def test_refuses_clearly_when_the_docker_daemon_is_unreachable(tmp_path: Path) -> None:
    bindir, calls = _fake_bin(tmp_path, docker_info_ok=False)
    result = _run(bindir)
    assert result.returncode == 1
    assert "Docker is installed but its daemon is not reachable" in result.stderr
    assert calls.read_text().splitlines() == ["docker info"]  # nothing created, built or installed
