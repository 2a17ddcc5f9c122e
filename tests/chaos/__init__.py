"""Chaos: sidecars under random faults against the real control plane, and a checker."""
