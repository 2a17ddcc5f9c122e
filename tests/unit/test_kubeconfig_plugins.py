"""The official client as the optional loader of credential plugins, in-process.

The built-in loader picks the file, the context and the cluster; the client
only runs the user's plugin (a real executable here) and gives its token or
client certificate to the same ``ApiConfig``. Without the client, one line
names the field and the install hint; ``run`` never loads it. Against the real
API server: tests/sidecar/test_kubectl_config.py (status) and
tests/injector/test_sweep_cluster.py (the injector and kopf's login).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.kube.config import ConfigError, load
from tests.cluster.pki import CertificateAuthority

from .kubeconfigs import doc, plugin, write


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create()


def runs(calls: Path) -> int:
    return len(calls.read_text().split()) if calls.exists() else 0


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_exec_plugins_token_is_used_and_the_plugin_runs_once(
    tmp_path: Path, version: str
) -> None:
    calls = tmp_path / "calls"
    user = plugin(tmp_path, {"token": "from-plugin"}, calls, version)
    config = load(str(write(tmp_path / "kc", doc(user=user))), plugins=True)
    for _ in range(3):
        assert config.authorization() == "Bearer from-plugin"
    assert runs(calls) == 1, "a token without expiry is asked for once"


def test_an_expired_token_runs_the_plugin_again(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    user = plugin(tmp_path, {"token": "short", "expirationTimestamp": past}, calls)
    config = load(str(write(tmp_path / "kc", doc(user=user))), plugins=True)
    before = runs(calls)
    assert before >= 1
    assert config.authorization() == "Bearer short"
    assert runs(calls) == before + 1, "each request asks again for an expired token"


def test_a_plugins_client_certificate_goes_into_the_same_tls_context(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    cert, key = ca.issue("plugin-user")
    calls = tmp_path / "calls"
    status = {"clientCertificateData": cert.decode(), "clientKeyData": key.decode()}
    ca_data = base64.b64encode(ca.cert_pem).decode()
    cluster = {"server": "https://127.0.0.1:1", "certificate-authority-data": ca_data}
    config = load(
        str(write(tmp_path / "kc", doc(cluster=cluster, user=plugin(tmp_path, status, calls)))),
        plugins=True,
    )
    assert config.authorization() is None
    assert config.tls_files.ca_data == ca.cert_pem  # the cluster is still the built-in loader's
    assert config.tls_files.cert_path and config.tls_files.key_path
    assert Path(config.tls_files.cert_path).read_bytes().strip() == cert.strip()


def test_a_failing_plugin_is_one_line_naming_the_user(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    path = write(tmp_path / "kc", doc(user=plugin(tmp_path, {}, calls, exit_code=3)))
    with pytest.raises(ConfigError) as err:
        load(str(path), plugins=True)
    assert str(err.value) == (
        f"kubeconfig {path}: user 'u': its plugin gave no credential: "
        "exec: process returned 3. boom"
    )


def test_a_plugin_that_gives_nothing_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", doc(user=plugin(tmp_path, {}, tmp_path / "calls")))
    with pytest.raises(ConfigError, match="user 'u': its plugin gave no credential"):
        load(str(path), plugins=True)


def test_without_the_official_client_one_line_names_the_field_and_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    calls = tmp_path / "calls"
    path = write(tmp_path / "kc", doc(user=plugin(tmp_path, {"token": "t"}, calls)))
    with pytest.raises(ConfigError) as err:
        load(str(path), plugins=True)
    assert str(err.value) == (
        f"kubeconfig {path}: user 'u' uses a credential plugin (exec), which needs the "
        "official client: pip install 'grelmicro-sidecar[kubectl]'"
    )
    assert runs(calls) == 0
    # What the built-in loader reads needs no client: --context, --as, a merged list.
    plain = write(
        tmp_path / "plain",
        doc(
            contexts=[
                {"name": "c", "context": {"cluster": "k", "user": "u"}},
                {"name": "x", "context": {"cluster": "k", "user": "u", "namespace": "x"}},
            ]
        ),
    )
    config = load(str(plain), "x", as_user="alice", plugins=True)
    assert (config.namespace, config.impersonation) == ("x", (("Impersonate-User", "alice"),))


RUN_PATH = """
import json, sys
from sidecar.commands.run import run, lock
from sidecar.kube.config import ConfigError, load
config = load(sys.argv[1])
try:
    load(sys.argv[2])
    refused = ""
except ConfigError as err:
    refused = str(err)
print(json.dumps({"loaded": "kubernetes" in sys.modules, "refused": refused}))
"""


def test_run_never_loads_the_official_client(tmp_path: Path) -> None:
    """A fresh interpreter: run's loader reads a kubeconfig, and refuses a plugin, without it."""
    plain = write(tmp_path / "plain", doc())
    calls = tmp_path / "calls"
    with_plugin = write(tmp_path / "exec", doc(user=plugin(tmp_path, {"token": "t"}, calls)))
    out = subprocess.run(
        [sys.executable, "-c", RUN_PATH, str(plain), str(with_plugin)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["loaded"] is False
    assert "which run and lock do not run" in report["refused"] and runs(calls) == 0
