"""``grelmicro-sidecar injector``: a bad setting is exit 2 and one line; ``--print-webhook-config``.

In-process (``invoke``), as ``cli`` runs the injector; the settings' values and
messages one by one are in tests/unit/injector/test_units.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.injector.webhookconfig import ca_bundle_of, webhook_configuration
from tests.unit.settings.invoke import Outcome, invoke, one_line


def injector(*argv: str) -> Outcome:
    return invoke(["injector", *argv])


def test_the_command_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("x")
    files = [f"--tls-cert-file={tmp_path / 'c'}", f"--tls-key-file={tmp_path / 'c'}"]
    for argv in (
        ["--port=x", "--sidecar-image=i"],
        [],
        ["--nope"],
        ["--sidecar-image=i"],  # no TLS files at the default paths
        ["--sidecar-image=i", *files, f"--kubeconfig={tmp_path / 'absent'}"],
    ):
        one_line(injector(*argv))


def test_print_webhook_config(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

    def print_config(*extra: str) -> Outcome:
        argv = [f"--ca-file={ca}", "--service-name=inj", "--service-namespace=ops", *extra]
        return injector("--print-webhook-config", *argv)

    done = print_config()
    assert done.returncode == 0, done.stderr
    expected = webhook_configuration(
        ca_bundle_of(ca.read_bytes()),
        service={"namespace": "ops", "name": "inj", "port": 443, "path": "/inject"},
        excluded_namespaces=["kube-system", "ops"],
    )
    assert json.loads(done.stdout) == expected
    for port, expected_code in (("8443", 0), ("0", 2), ("https", 2)):
        done = print_config(f"--service-port={port}")
        assert done.returncode == expected_code, done.stderr
        if expected_code == 0:
            hook = json.loads(done.stdout)["webhooks"][0]
            assert hook["clientConfig"]["service"]["port"] == 8443
        else:
            assert done.stderr.strip() == (
                f"grelmicro-sidecar injector: --service-port={port!r} is not valid; "
                "expected a port number from 1 to 65535"
            ), done.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_exit_0(flag: str) -> None:
    done = injector(flag)
    assert done.returncode == 0 and "--sidecar-image" in done.stdout and not done.stderr
