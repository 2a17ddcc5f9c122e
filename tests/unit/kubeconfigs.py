"""Kubeconfig documents and the environment around them, for the loader's in-process tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def doc(
    server: str = "https://127.0.0.1:1",
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """One context ``c`` (cluster ``k``, user ``u``); ``top`` replaces top-level keys."""
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {"name": "k", "cluster": cluster if cluster is not None else {"server": server}}
        ],
        "users": [{"name": "u", "user": user if user is not None else {"token": "abc"}}],
    }
    out.update(top)
    return out


def write(path: Path, content: Any) -> Path:
    """``content`` as the file: bytes, text, or a document (JSON)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


class Place:
    """Where this process stands: $KUBECONFIG, $HOME, and whether it is a pod."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self.mp = monkeypatch
        for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            monkeypatch.delenv(name, raising=False)
        self.home = root / "home"
        self.home.mkdir()
        monkeypatch.setenv("HOME", str(self.home))
        self.sa = root / "serviceaccount"
        monkeypatch.setattr("sidecar.kube.config.SERVICE_ACCOUNT_DIR", self.sa)

    def kubeconfig_env(self, *paths: Path) -> None:
        self.mp.setenv("KUBECONFIG", ":".join(str(p) for p in paths))

    def home_file(self, content: Any) -> Path:
        return write(self.home / ".kube" / "config", content)

    def pod(self, ca_pem: bytes, namespace: str = "apps") -> None:
        """The kubelet's service-account mount (token sa-token) and the API server's address."""
        self.sa.mkdir()
        (self.sa / "token").write_text("sa-token\n")
        (self.sa / "namespace").write_text(namespace)
        (self.sa / "ca.crt").write_bytes(ca_pem)
        self.mp.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        self.mp.setenv("KUBERNETES_SERVICE_PORT", "443")


def plugin(
    directory: Path, status: dict[str, Any], calls: Path, version: str = "v1", exit_code: int = 0
) -> dict[str, Any]:
    """A kubeconfig ``exec`` user whose plugin (a shell script) prints ``status``.

    Named by a relative path (kubectl runs it from the kubeconfig's folder); each run
    adds a line to ``calls``. A non-zero ``exit_code`` fails with "boom" on stderr.
    """
    api_version = f"client.authentication.k8s.io/{version}"
    credential = {"apiVersion": api_version, "kind": "ExecCredential", "status": status}
    script = directory / "bin" / "get-credential"
    script.parent.mkdir(parents=True, exist_ok=True)
    end = f"echo boom >&2\nexit {exit_code}\n" if exit_code else ""
    script.write_text(
        f"#!/bin/sh\necho x >> {calls}\n{end}cat <<'EOF'\n{json.dumps(credential)}\nEOF\n"
    )
    script.chmod(0o755)
    return {"exec": {"apiVersion": api_version, "command": "./bin/get-credential"}}
