"""Test support: a real Kubernetes control plane on loopback (not product code)."""

from .controlplane import ControlPlane, free_port

__all__ = ["ControlPlane", "free_port"]
