"""Builds the control-plane binaries from the Go module proxy and caches them.

Each Go module under ``gomod/`` pins one upstream release. The binaries are
built once per release into a cache outside the repository (``$GRELMICRO_SIDECAR_CACHE``
or ``~/.cache/grelmicro-sidecar``), keyed by component and version, and reused
on every later run. Builds are serialised with a file lock so parallel test
sessions on one machine never build twice or see a half-written directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

GOMOD = Path(__file__).resolve().parent / "gomod"


@dataclass(frozen=True)
class Component:
    """One Go module that yields one or more binaries."""

    name: str
    module: str  # the upstream module whose version keys the cache
    binaries: dict[str, str]  # binary name -> Go package path
    ldflags: tuple[str, ...]  # -X settings, "{version}" substituted
    gomod: str = ""  # the directory under gomod/ when it is not ``name``
    cgo: bool = False  # runc needs libseccomp through cgo
    tags: tuple[str, ...] = ()

    @property
    def gomod_dir(self) -> Path:
        return GOMOD / (self.gomod or self.name)

    def version(self) -> str:
        text = (self.gomod_dir / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(v\S+)", text, re.M)
        if not match:
            raise RuntimeError(f"{self.gomod_dir}/go.mod does not require {self.module}")
        return match.group(1)


def _k8s_ldflags() -> tuple[str, ...]:
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"{pkg}.gitVersion={{version}}",
            f"{pkg}.gitMajor={{major}}",
            f"{pkg}.gitMinor={{minor}}",
            f"{pkg}.gitTreeState=clean",
            f"{pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


COMPONENTS = {
    c.name: c
    for c in (
        Component(
            "kubernetes",
            "k8s.io/kubernetes",
            {
                "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
                "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
                "kubectl": "k8s.io/kubernetes/cmd/kubectl",
            },
            _k8s_ldflags(),
        ),
        Component(
            "kubernetes-node",
            "k8s.io/kubernetes",
            {
                "kubelet": "k8s.io/kubernetes/cmd/kubelet",
                "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
                "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            },
            _k8s_ldflags(),
            gomod="kubernetes",
        ),
        Component(
            "containerd",
            "github.com/containerd/containerd/v2",
            {
                "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
                "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
                "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
            },
            ("github.com/containerd/containerd/v2/version.Version={version}",),
        ),
        Component(
            "runc",
            "github.com/opencontainers/runc",
            {"runc": "github.com/opencontainers/runc"},
            ("main.version={version_bare}",),
            cgo=True,
            tags=("seccomp",),
        ),
        Component(
            "cni",
            "github.com/containernetworking/plugins",
            {
                p: f"github.com/containernetworking/plugins/plugins/{kind}/{p}"
                for kind, p in (
                    ("main", "bridge"),
                    ("ipam", "host-local"),
                    ("main", "loopback"),
                    ("meta", "portmap"),
                )
            },
            (),
        ),
        Component(
            "coredns",
            "github.com/coredns/coredns",
            {"coredns": "github.com/coredns/coredns"},
            (),
        ),
        Component(
            "etcd",
            "go.etcd.io/etcd/server/v3",
            {"etcd": "go.etcd.io/etcd/server/v3"},
            ("go.etcd.io/etcd/api/v3/version.GitSHA={version}",),
        ),
        Component(
            # Only Kubernetes service discovery is compiled in (Prometheus's own
            # build tags): the cloud SDKs of the others would double the build.
            "prometheus",
            "github.com/prometheus/prometheus",
            {
                "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
                "promtool": "github.com/prometheus/prometheus/cmd/promtool",
            },
            ("github.com/prometheus/common/version.Version={version}",),
            tags=("remove_all_sd", "enable_kubernetes_sd"),
        ),
        Component(
            # The release image's SBOM (hack/release.py): Debian's and Python's packages.
            "syft",
            "github.com/anchore/syft",
            {"syft": "github.com/anchore/syft/cmd/syft"},
            ("main.version={version_bare}",),
        ),
        Component(
            # Lints .github/workflows (tests/ship/test_workflows.py), shellcheck on their run: steps.
            "actionlint",
            "github.com/rhysd/actionlint",
            {"actionlint": "github.com/rhysd/actionlint/cmd/actionlint"},
            ("github.com/rhysd/actionlint.version={version}",),
        ),
        Component(
            # The OCI registry that stands in for ghcr.io (tests/cluster/registry.py): TLS, a log.
            "registry",
            "github.com/distribution/distribution/v3",
            {"registry": "github.com/distribution/distribution/v3/cmd/registry"},
            ("github.com/distribution/distribution/v3/version.version={version}",),
        ),
        Component(
            "helm",
            "helm.sh/helm/v3",
            {"helm": "helm.sh/helm/v3/cmd/helm"},
            (
                "helm.sh/helm/v3/internal/version.version={version}",
                "helm.sh/helm/v3/internal/version.gitTreeState=clean",
            ),
        ),
    )
}


def cache_base() -> Path:
    """Where everything built or installed for tests and benchmarks is cached (outside the repo)."""
    env = os.environ.get("GRELMICRO_SIDECAR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "grelmicro-sidecar"


def cache_root() -> Path:
    return cache_base() / "bin"


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version()}"


def _log(msg: str) -> None:
    print(f"[tests.cluster] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """An exclusive lock shared by every process on this machine that builds ``name``."""
    root = cache_base()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_once(target: Path, ready: Callable[[Path], bool], build: Callable[[Path], None]) -> None:
    """Make ``target`` with ``build(staging)`` unless ``ready(target)``.

    Serialised by a file lock (parallel sessions never build twice) and
    published by one rename (nobody sees a half-built directory; a failed
    build leaves nothing behind).
    """
    if ready(target):
        return
    with file_lock(target.name):
        if ready(target):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            build(staging)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def go_build(
    directory: Path,
    package: str,
    output: Path,
    ldflags: list[str],
    *,
    cgo: bool = False,
    tags: tuple[str, ...] = (),
) -> None:
    """``go build`` as every binary here is built: CGO off (unless asked), ``-trimpath``, modules from the proxy."""
    if shutil.which("go") is None:
        raise RuntimeError(
            "Go is not on PATH: install Go 1.26 or newer (the Go module proxy supplies the rest)"
        )
    env = dict(os.environ, CGO_ENABLED="1" if cgo else "0", GOFLAGS="-mod=mod")
    tag_args = ["-tags", ",".join(tags)] if tags else []
    subprocess.run(
        [
            "go",
            "build",
            "-trimpath",
            *tag_args,
            "-ldflags",
            " ".join(["-s", "-w", *ldflags]),
            "-o",
            str(output),
            package,
        ],
        cwd=directory,
        env=env,
        check=True,
    )


def ensure(name: str) -> dict[str, Path]:
    """Return the binaries of one component, building them first if not cached."""
    component = COMPONENTS[name]
    target = component_dir(component)
    build_once(
        target,
        ready=lambda t: all((t / b).exists() for b in component.binaries),
        build=lambda staging: _build(component, staging),
    )
    return {b: target / b for b in component.binaries}


def _build(component: Component, staging: Path) -> None:
    version = component.version()
    major, minor = [*version.lstrip("v").split("."), "0"][:2]
    subs = {"version": version, "version_bare": version.lstrip("v"), "major": major, "minor": minor}
    ldflags = [f"-X={f.format(**subs)}" for f in component.ldflags]
    started = time.monotonic()
    _log(f"building {component.name} {version} ({', '.join(component.binaries)}) ...")
    for binary, package in component.binaries.items():
        t0 = time.monotonic()
        go_build(
            component.gomod_dir,
            package,
            staging / binary,
            ldflags,
            cgo=component.cgo,
            tags=component.tags,
        )
        _log(f"  built {binary} in {time.monotonic() - t0:.1f}s")
    _log(f"built {component.name} {version} in {time.monotonic() - started:.1f}s")


CONTROL_PLANE = ("kubernetes", "etcd", "helm")
NODE = ("kubernetes-node", "containerd", "runc", "cni", "coredns")
#: Prometheus and promtool: the alerting rules, their unit tests and the dashboard's queries.
MONITORING = ("prometheus",)
#: What ``make release`` and its tests need besides helm: the SBOM, the workflows' lint, the registry.
RELEASE = ("syft", "actionlint", "registry")


def ensure_all(names: tuple[str, ...] = CONTROL_PLANE) -> dict[str, Path]:
    """All binaries of the named components (the control plane's by default), by binary name."""
    out: dict[str, Path] = {}
    for name in names:
        out.update(ensure(name))
    return out
