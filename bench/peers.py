"""The reference implementations the sidecar is measured against, installed on demand.

- client-go: ``bench/peers/clientgo`` (a Go module pinning ``k8s.io/client-go``)
  is built from the Go module proxy once per client-go version and cached in
  ``~/.cache/grelmicro-sidecar/bin/bench-clientgo-<version>-<hash>/``, like the
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

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cluster.binaries import build_once, cache_base, cache_root, file_lock, go_build

HERE = Path(__file__).resolve().parent
CLIENTGO_DIR = HERE / "peers" / "clientgo"
PYPEER = HERE / "peers" / "pypeer.py"

GRELMICRO_VERSION = "0.20.0"
OFFICIAL_VERSION = "37.0.2"


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def clientgo_version() -> str:
    text = (CLIENTGO_DIR / "go.mod").read_text()
    match = re.search(r"^\s*k8s\.io/client-go\s+(v\S+)", text, re.M)
    if not match:
        raise RuntimeError(f"{CLIENTGO_DIR}/go.mod does not require k8s.io/client-go")
    return match.group(1)


def ensure_clientgo() -> Path:
    """The client-go peer binary, built first if not cached, keyed by version and by the
    hash of its sources (every .go file, go.mod, go.sum): two checkouts with different
    peers each keep their own, and never rebuild one the other is running."""
    sources = [*sorted(CLIENTGO_DIR.glob("*.go")), CLIENTGO_DIR / "go.mod", CLIENTGO_DIR / "go.sum"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    target = cache_root() / f"bench-clientgo-{clientgo_version()}-{digest[:12]}"

    def ready(t: Path) -> bool:
        stamp = t / "main.go.sha"
        return (t / "clientgo-peer").exists() and stamp.exists() and stamp.read_text() == digest

    def build(staging: Path) -> None:
        _log(f"building the client-go peer (client-go {clientgo_version()}) ...")
        go_build(CLIENTGO_DIR, ".", staging / "clientgo-peer", [])
        (staging / "main.go.sha").write_text(digest)

    build_once(target, ready, build)
    return target / "clientgo-peer"


def peer_venv() -> Path:
    return cache_base() / f"bench-venv-grelmicro{GRELMICRO_VERSION}-kubernetes{OFFICIAL_VERSION}"


def ensure_python_peers() -> Path:
    """The peer virtualenv's python, created first if not cached."""
    venv = peer_venv()
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    with file_lock(venv.name):
        if stamp.exists():
            return python
        # A venv is not relocatable (its scripts name their own path), so it is
        # built in place under the lock rather than staged and renamed.
        _log(f"creating {venv} (grelmicro {GRELMICRO_VERSION}, kubernetes {OFFICIAL_VERSION}) ...")
        if venv.exists():
            shutil.rmtree(venv)
        try:
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
