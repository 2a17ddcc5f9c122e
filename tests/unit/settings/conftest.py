"""The settings tests run commands in this process, with no cluster in reach."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_cluster_in_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command without --kubeconfig finds none: not in a pod, no $KUBECONFIG, no ~/.kube."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kc")
