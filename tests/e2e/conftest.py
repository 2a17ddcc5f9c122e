"""The end-to-end suite: the product in running pods, on any cluster a kubeconfig reaches.

By default it starts this machine's node (``tests/cluster/node.py``), builds
the image from the Dockerfile and loads it there. With ``E2E_KUBECONFIG`` set
it runs against that cluster instead (``hack/kind-e2e.sh`` does this with
kind), which must already have the image the chart names by default
(``images.product_image_name``: values.yaml's ``image.repository`` at ``appVersion``).

Fixtures: ``e2e`` (kubectl and helm for the cluster), ``release`` (the chart
installed once per session with the built image, uninstalled at the end),
``workload_namespace`` (a fresh namespace enforcing Pod Security
``restricted``, with ``manifests/rbac.yaml`` applied as a user would),
``registry`` (a stand-in for ghcr.io that this machine's node pulls from,
``tests/cluster/registry.py``) and ``published`` (``make release``'s image and
chart pushed there by ``hack/publish.sh``, as the release workflow pushes them).
README's blocks run against them through ``tests/e2e/readme.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import binaries, host
from tests.cluster.node import Node
from tests.cluster.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "grelmicro-sidecar"
RELEASE = "e2e"
RELEASE_NAMESPACE = "grelmicro-system"


@dataclass
class Cluster:
    kubeconfig: Path

    def command(self, *args: str) -> list[str]:
        """The kubectl command line for ``args`` against this cluster."""
        return [str(tool("kubectl", "kubernetes")), f"--kubeconfig={self.kubeconfig}", *args]

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        helm = tool("helm", "helm")
        done = subprocess.run(
            [str(helm), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done


# Run inside the product image (it has Python): the process's user and whether / is writable.
_WHO_AM_I = (
    "import os\n"
    "try:\n    open('/.probe', 'w')\n    rootfs = 'writable'\n"
    "except OSError as err:\n    rootfs = err.strerror\n"
    "print(os.getuid(), os.getgid(), rootfs, sep=',')"
)


def process_identity(cluster: Cluster, namespace: str, pod: str, container: str) -> list[str]:
    """[uid, gid, root filesystem] as a process started in that container sees them."""
    out = cluster.kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--", "python", "-c", _WHO_AM_I
    ).stdout
    return out.strip().split(",")


def probe_pod(name: str, **spec: Any) -> dict[str, Any]:
    """An annotated pod Pod Security "restricted" admits, for admission only (a dry run, or
    ``spec`` pinning it to no node): its app never needs to run."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "probe"},
            "annotations": {"leader-election.grelmicro.io/inject": "true"},
        },
        "spec": {
            **spec,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "app",
                    "image": "curlimages/curl:8.11.1",
                    "command": ["sleep", "infinity"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def tool(name: str, component: str) -> Path:
    """On someone else's cluster (``E2E_KUBECONFIG``) the user's own kubectl/helm when on
    PATH; otherwise the ones built here."""
    found = shutil.which(name) if os.environ.get("E2E_KUBECONFIG") else None
    return Path(found) if found else binaries.ensure(component)[name]


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def e2e(request: pytest.FixtureRequest) -> Cluster:
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        return Cluster(Path(external))
    from tests.cluster import images

    node = request.getfixturevalue("node")
    node.load_images(images.product_images())
    return Cluster(node.kubeconfig)


@pytest.fixture
def local_node(e2e: Cluster, request: pytest.FixtureRequest) -> Node:
    """This machine's node, for tests that act through the runtime (kill a container
    through containerd, freeze a pod's cgroup); skipped on someone else's cluster."""
    if os.environ.get("E2E_KUBECONFIG"):
        pytest.skip("acts on containers through this machine's containerd and cgroups")
    node: Node = request.getfixturevalue("node")
    return node


@pytest.fixture(scope="session")
def release(e2e: Cluster) -> Iterator[str]:
    """The chart installed with its defaults (the image it names is the one built here)."""
    e2e.helm(
        "install",
        RELEASE,
        str(CHART),
        f"--namespace={RELEASE_NAMESPACE}",
        "--create-namespace",
        "--wait",
        "--timeout=180s",
    )
    try:
        yield RELEASE
    finally:
        e2e.helm(
            "uninstall",
            RELEASE,
            f"--namespace={RELEASE_NAMESPACE}",
            "--wait",
            "--timeout=120s",
            check=False,
        )
        e2e.kubectl("delete", "namespace", RELEASE_NAMESPACE, "--wait=false", check=False)


@pytest.fixture(scope="session")
def registry(
    e2e: Cluster, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """The stand-in for ghcr.io, mirrored into this machine's node's containerd."""
    if os.environ.get("E2E_KUBECONFIG"):
        pytest.skip("mirrors ghcr.io in this machine's containerd")
    node: Node = request.getfixturevalue("node")
    started = Registry(tmp_path_factory.mktemp("registry") / "registry").start()
    started.mirror(node.registry_hosts)
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"the registry left this behind: {left}"


@dataclass(frozen=True)
class Published:
    registry: Registry
    dist: Path  # make release's folder
    version: str
    digest: str  # the image's manifest digest, the chart's image.digest


#: What hack/publish.sh needs besides helm (GitHub's runners have it).
PUBLISH_TOOLS = {"skopeo": "/usr/bin/skopeo"}


@pytest.fixture(scope="session")
def published(
    e2e: Cluster, registry: Registry, released: Path, tmp_path_factory: pytest.TempPathFactory
) -> Published:
    """``make release``'s image and chart in the stand-in for ghcr.io, pushed by the release
    workflow's own script, as a maintainer's shell runs it (ghcr.io resolved to the registry)."""
    from sidecar import __version__
    from tests.e2e.readme import UserShell

    host.ensure_packages(PUBLISH_TOOLS)
    shell = UserShell(e2e.kubeconfig, tmp_path_factory.mktemp("publisher"), registry)
    shell.env = {"DIST": str(released)}
    pushed = shell.run("hack/publish.sh")
    assert pushed.ok, f"hack/publish.sh failed:\n{pushed.output}"
    stored = {(r.method, r.path) for r in registry.requests() if r.status < 400}
    for repository in ("grelmicro-sidecar", "charts/grelmicro-sidecar"):
        put = ("PUT", f"/v2/grelinfo/{repository}/manifests/{__version__}")
        assert put in stored, f"hack/publish.sh did not push {put[1]}: {sorted(stored)}"
    digest = (released / f"grelmicro-sidecar-{__version__}.image-digest").read_text().strip()
    return Published(registry, released, __version__, digest)


def _next_patch(version: str) -> str:
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return f"{major}.{minor}.{patch + 1}"


@pytest.fixture(scope="session")
def published_next(
    e2e: Cluster, published: Published, tmp_path_factory: pytest.TempPathFactory
) -> Published:
    """The release after this one, as a maintainer makes it: this tree's tracked files with
    the version bumped where ``make release`` reads it (sidecar/__init__.py, Chart.yaml, a
    CHANGELOG entry), built by that copy's ``make release`` (another image: the version is
    in its package and its label) and pushed by its ``hack/publish.sh``."""
    from tests.e2e.readme import UserShell

    version = _next_patch(published.version)
    tree = tmp_path_factory.mktemp("next") / "grelmicro-sidecar"
    tracked = (
        subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, tracked):
        source = ROOT / rel
        if source.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / rel)
    bumps = [  # (file, old, new, how many)
        ("sidecar/__init__.py", f'"{published.version}"', f'"{version}"', 1),
        ("charts/grelmicro-sidecar/Chart.yaml", published.version, version, 2),
        ("CHANGELOG.md", "## [", f"## [{version}] - Unreleased\n\nA test release.\n\n## [", 1),
    ]
    for rel, old, new, count in bumps:
        text = (tree / rel).read_text()
        assert text.count(old) >= count, f"{rel} has no {old!r}"
        (tree / rel).write_text(text.replace(old, new, count))
    git = ["git", "-C", str(tree), "-c", "user.name=test", "-c", "user.email=test@example"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", f"release {version}"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    dist = tree / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "hack.release", "build", "--dist", str(dist)],
        cwd=tree, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert built.returncode == 0, f"the next release failed:\n{built.stderr[-4000:]}"
    shell = UserShell(e2e.kubeconfig, tmp_path_factory.mktemp("publisher-next"), published.registry)
    shell.env = {"DIST": str(dist)}
    pushed = shell.run(str(tree / "hack" / "publish.sh"))
    assert pushed.ok, f"publishing {version} failed:\n{pushed.output}"
    digest = (dist / f"grelmicro-sidecar-{version}.image-digest").read_text().strip()
    assert digest != published.digest, "the next release's image is this one's"
    return Published(published.registry, dist, version, digest)


@pytest.fixture
def workload_namespace(e2e: Cluster, release: str) -> Iterator[str]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    e2e.kubectl("create", "namespace", name)
    e2e.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    e2e.kubectl("apply", "-n", name, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    try:
        yield name
    finally:
        e2e.kubectl("delete", "namespace", name, "--wait=false", check=False)
