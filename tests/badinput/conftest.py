"""Real sidecar processes for the focused tests here (the ``spawn`` fixture of tests/sidecar)."""

from tests.sidecar.conftest import pytest_runtest_makereport, spawn  # noqa: F401
