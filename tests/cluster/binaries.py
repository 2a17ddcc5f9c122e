"""Builds the control-plane binaries from the Go module proxy and caches them.

Each Go module under ``gomod/`` pins one upstream release. The binaries are
built once per release into a cache outside the repository (``$GRELMICRO_SIDECAR_CACHE``
or ``~/.cache/grelmicro-sidecar``), keyed by component and version, and reused
on every later run. Builds are serialised with a file lock so parallel test
sessions on one machine never build twice or see a half-written directory.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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

    @property
    def gomod_dir(self) -> Path:
        return GOMOD / self.name

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
            "etcd",
            "go.etcd.io/etcd/server/v3",
            {"etcd": "go.etcd.io/etcd/server/v3"},
            ("go.etcd.io/etcd/api/v3/version.GitSHA={version}",),
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


def cache_root() -> Path:
    env = os.environ.get("GRELMICRO_SIDECAR_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "grelmicro-sidecar"
    return base / "bin"


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version()}"


def _log(msg: str) -> None:
    print(f"[tests.cluster] {msg}", file=sys.stderr, flush=True)


def ensure(name: str) -> dict[str, Path]:
    """Return the binaries of one component, building them first if not cached."""
    component = COMPONENTS[name]
    target = component_dir(component)
    paths = {b: target / b for b in component.binaries}
    if all(p.exists() for p in paths.values()):
        return paths
    cache_root().mkdir(parents=True, exist_ok=True)
    lock_path = cache_root() / f".{component.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(p.exists() for p in paths.values()):
            return paths
        _build(component, target)
    return paths


def _build(component: Component, target: Path) -> None:
    if shutil.which("go") is None:
        raise RuntimeError("Go is not on PATH: install Go 1.26 or newer to build the control plane")
    version = component.version()
    major, minor = [*version.lstrip("v").split("."), "0"][:2]
    subs = {"version": version, "major": major, "minor": minor}
    ldflags = ["-s", "-w"] + [f"-X={f.format(**subs)}" for f in component.ldflags]
    staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=cache_root()))
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    started = time.monotonic()
    _log(f"building {component.name} {version} ({', '.join(component.binaries)}) ...")
    try:
        subprocess.run(["go", "mod", "download"], cwd=component.gomod_dir, env=env, check=True)
        for binary, package in component.binaries.items():
            t0 = time.monotonic()
            subprocess.run(
                [
                    "go",
                    "build",
                    "-trimpath",
                    "-ldflags",
                    " ".join(ldflags),
                    "-o",
                    str(staging / binary),
                    package,
                ],
                cwd=component.gomod_dir,
                env=env,
                check=True,
            )
            _log(f"  built {binary} in {time.monotonic() - t0:.1f}s")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _log(f"built {component.name} {version} in {time.monotonic() - started:.1f}s -> {target}")


def ensure_all() -> dict[str, Path]:
    """All binaries of all components, by binary name."""
    out: dict[str, Path] = {}
    for name in COMPONENTS:
        out.update(ensure(name))
    return out
