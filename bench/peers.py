"""The reference implementations the sidecar is measured against, installed on demand.

- client-go: ``bench/peers/clientgo`` (a Go module pinning ``k8s.io/client-go``)
  is built from the Go module proxy once per client-go version and cached in
  ``~/.cache/grelmicro-sidecar/bin/bench-clientgo-<version>/``, like the
  control-plane binaries (``tests/cluster/binaries.py``).
- grelmicro and the official ``kubernetes`` client: one virtualenv keyed by the
  pinned versions, ``~/.cache/grelmicro-sidecar/bench-venv-<versions>/``, that
  runs ``bench/peers/pypeer.py``.

grelmicro 0.20.0 is the newest release whose ``Requires-Python`` admits the
project's Python 3.11 (later ones need a newer Python; pip says so).
Builds are serialised with a file lock, and a half-built cache entry is never
left behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENTGO_DIR = HERE / "peers" / "clientgo"
PYPEER = HERE / "peers" / "pypeer.py"

GRELMICRO_VERSION = "0.20.0"
OFFICIAL_VERSION = "37.0.2"


def cache_base() -> Path:
    env = os.environ.get("GRELMICRO_SIDECAR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "grelmicro-sidecar"


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def clientgo_version() -> str:
    text = (CLIENTGO_DIR / "go.mod").read_text()
    match = re.search(r"^\s*k8s\.io/client-go\s+(v\S+)", text, re.M)
    if not match:
        raise RuntimeError(f"{CLIENTGO_DIR}/go.mod does not require k8s.io/client-go")
    return match.group(1)


def _locked(name: str) -> int:
    root = cache_base()
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f".{name}.lock", os.O_CREAT | os.O_WRONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def ensure_clientgo() -> Path:
    """The client-go peer binary, built first if not cached."""
    target = cache_base() / "bin" / f"bench-clientgo-{clientgo_version()}"
    binary = target / "clientgo-peer"
    source_stamp = target / "main.go.sha"
    digest = _digest(CLIENTGO_DIR / "main.go")
    if binary.exists() and source_stamp.exists() and source_stamp.read_text() == digest:
        return binary
    fd = _locked("bench-clientgo")
    try:
        if binary.exists() and source_stamp.exists() and source_stamp.read_text() == digest:
            return binary
        if shutil.which("go") is None:
            raise RuntimeError(
                "Go is not on PATH: install Go 1.26 or newer to build the client-go peer"
            )
        _log(f"building the client-go peer (client-go {clientgo_version()}) ...")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".bench-clientgo-", dir=target.parent))
        try:
            env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
            subprocess.run(
                [
                    "go",
                    "build",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    "-o",
                    str(staging / "clientgo-peer"),
                    ".",
                ],
                cwd=CLIENTGO_DIR,
                env=env,
                check=True,
            )
            (staging / "main.go.sha").write_text(digest)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    finally:
        os.close(fd)
    return binary


def peer_venv() -> Path:
    return cache_base() / f"bench-venv-grelmicro{GRELMICRO_VERSION}-kubernetes{OFFICIAL_VERSION}"


def ensure_python_peers() -> Path:
    """The peer virtualenv's python, created first if not cached."""
    venv = peer_venv()
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    fd = _locked("bench-venv")
    try:
        if stamp.exists():
            return python
        _log(f"creating {venv} (grelmicro {GRELMICRO_VERSION}, kubernetes {OFFICIAL_VERSION}) ...")
        if venv.exists():
            shutil.rmtree(venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(python), "-m", "pip", "install", "--quiet",
                f"grelmicro[kubernetes]=={GRELMICRO_VERSION}",
                f"kubernetes=={OFFICIAL_VERSION}",
            ],
            check=True,
        )  # fmt: skip
        stamp.write_text("ok\n")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    finally:
        os.close(fd)
    return python


def python_versions(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [
            str(python), "-c",
            "import importlib.metadata as m; "
            "print(m.version('grelmicro'), m.version('kubernetes'), m.version('lightkube'))",
        ],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {"grelmicro": out[0], "kubernetes": out[1], "lightkube": out[2]}


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
