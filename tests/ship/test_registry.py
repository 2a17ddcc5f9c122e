"""The stand-in for ghcr.io and the user's shell, without a node (tests/cluster/registry.py,
tests/e2e/readme.py): ghcr.io means the registry inside the shell's mount namespace and
nothing changes outside it; helm pushes and pulls a chart there over TLS; the registry
stops and leaves nothing behind. The node's side (containerd's mirror) is
tests/e2e/test_install_from_registry.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster.registry import Registry
from tests.e2e import readme
from tests.ship.tools import CHART

pytestmark = pytest.mark.timeout(600)  # builds the registry when the cache has none


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    if os.geteuid() != 0:
        pytest.skip("a private /etc/hosts needs root (unshare --mount)")
    return Registry(tmp_path / "registry")


def _hosts(name: str) -> str:
    done = subprocess.run(["getent", "hosts", name], capture_output=True, text=True)
    return done.stdout.strip()


def test_only_the_users_shell_sees_ghcr_io_on_this_machine(
    registry: Registry, tmp_path: Path
) -> None:
    etc_hosts = Path("/etc/hosts").read_bytes()
    outside = _hosts("ghcr.io")
    with registry:
        shell = readme.UserShell(tmp_path / "kubeconfig", tmp_path / "home", registry)
        ran = shell.run("getent hosts ghcr.io", trace=False)
        assert ran.ok and ran.output.split() == [registry.address, "ghcr.io"], ran.output
        assert _hosts("ghcr.io") == outside  # this process, outside the namespace
        assert Path("/etc/hosts").read_bytes() == etc_hosts
        # helm, as a user runs it, pushes to and pulls from "ghcr.io" over TLS.
        ran = shell.run(
            f"helm package {CHART} --destination . --version 0.0.0-test\n"
            "helm push grelmicro-sidecar-0.0.0-test.tgz oci://ghcr.io/grelinfo/charts\n"
            "helm show chart oci://ghcr.io/grelinfo/charts/grelmicro-sidecar --version 0.0.0-test\n",
            cwd=tmp_path,
        )
        assert ran.ok, ran.output
        assert "version: 0.0.0-test" in ran.output
        paths = {(r.method, r.path) for r in registry.requests() if r.status < 400}
        assert ("PUT", "/v2/grelinfo/charts/grelmicro-sidecar/manifests/0.0.0-test") in paths
        assert ("GET", "/v2/grelinfo/charts/grelmicro-sidecar/manifests/0.0.0-test") in paths
    assert registry.leftovers() == []
    assert Path("/etc/hosts").read_bytes() == etc_hosts


def test_without_the_registry_ghcr_io_is_not_reached(registry: Registry, tmp_path: Path) -> None:
    """The check above can fail: a shell without the override does not reach the registry."""
    with registry:
        shell = readme.UserShell(tmp_path / "kubeconfig", tmp_path / "home")
        ran = shell.run("getent hosts ghcr.io", trace=False)
        assert registry.address not in ran.output
