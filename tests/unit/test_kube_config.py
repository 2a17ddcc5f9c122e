"""Cluster connection settings: in-cluster files and kubeconfig variants."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest

from sidecar.kube.config import ConfigError, TokenFile, in_cluster, load
from tests.cluster.pki import CertificateAuthority


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create()


def _kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [
                    {"name": "k", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [
                    {"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team"}}
                ],
            }
        )
    )
    return path


def _pod(
    sa_dir: Path, ca: CertificateAuthority, monkeypatch: pytest.MonkeyPatch, ns: str, host: str
) -> None:
    """What the kubelet gives a pod: the service-account mount (token tok-1) and the API address."""
    (sa_dir / "ca.crt").write_bytes(ca.cert_pem)
    (sa_dir / "token").write_text("tok-1\n")
    (sa_dir / "namespace").write_text(ns)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def test_in_cluster_reads_the_service_account_mount(
    tmp_path: Path, ca: CertificateAuthority, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pod(tmp_path, ca, monkeypatch, "apps", host="10.0.0.1")
    cfg = in_cluster(tmp_path)
    assert (cfg.server, cfg.namespace) == ("https://10.0.0.1:443", "apps")
    assert cfg.authorization() == "Bearer tok-1"


def test_injector_login_dials_the_address_the_kubelet_gives_not_a_dns_name(
    tmp_path: Path, ca: CertificateAuthority, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sidecar.injector.operator import connection_info

    _pod(tmp_path, ca, monkeypatch, "grelmicro-system", host="10.96.0.1")
    login = connection_info(in_cluster(tmp_path))
    assert (login.server, login.token, login.default_namespace) == (
        "https://10.96.0.1:443",
        "tok-1",
        "grelmicro-system",
    )
    assert login.ca_path == str(tmp_path / "ca.crt")
    (tmp_path / "token").write_text("tok-2")  # kopf logs in again after a 401: the new token
    assert connection_info(in_cluster(tmp_path)).token == "tok-2"


def test_injector_login_and_its_own_calls_share_one_kubeconfig_reading(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    """kopf gets the same server, CA and client certificate as the injector's own calls."""
    from sidecar.injector.operator import connection_info

    cert, key = ca.issue("injector")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    config = load(
        str(
            _kubeconfig(
                tmp_path / "kc",
                {"certificate-authority": "ca.pem"},
                {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            )
        )
    )
    login = connection_info(config)
    assert (login.server, login.token, login.default_namespace) == (
        "https://127.0.0.1:6443",
        None,
        "team",
    )
    assert (login.ca_path, login.certificate_data, login.private_key_data) == (
        str(tmp_path / "ca.pem"),
        cert,
        key,
    )
    login.as_ssl_context()  # kopf's own TLS stack accepts it


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one")
    tf = TokenFile(path)
    assert tf.token() == "one"
    staged = tmp_path / "staged"
    staged.write_text("two")
    staged.replace(path)  # a new inode, as the kubelet's atomic swap makes
    assert tf.token() == "two"
    path.unlink()
    assert tf.token() == "two", "a missing file mid-swap keeps the last good token"


def test_in_cluster_without_a_token_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(ConfigError, match="automountServiceAccountToken"):
        in_cluster(tmp_path)


def test_kubeconfig_with_inline_client_certificate(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    cert, key = ca.issue("dev")
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    path = _kubeconfig(
        tmp_path / "kc",
        {"certificate-authority-data": b64(ca.cert_pem)},
        {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
    )
    cfg = load(str(path))
    assert cfg.namespace == "team" and cfg.authorization() is None
    assert list(tmp_path.iterdir()) == [path], "no key material is left behind"


def test_kubeconfig_relative_token_file(tmp_path: Path, ca: CertificateAuthority) -> None:
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    (tmp_path / "tok").write_text("abc")
    cfg = load(
        str(_kubeconfig(tmp_path / "kc", {"certificate-authority": "ca.pem"}, {"tokenFile": "tok"}))
    )
    assert cfg.authorization() == "Bearer abc"


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"insecure-skip-tls-verify": True}, {"token": "x"}, "always verifies TLS"),
        ({}, {"exec": {"command": "aws"}}, "credential plugin \\(exec\\)"),
        ({"certificate-authority-data": "!!!"}, {"token": "x"}, "not base64"),
        (
            {"certificate-authority": "/nonexistent/ca.pem"},
            {"token": "x"},
            "cannot load the cluster CA",
        ),
    ],
)
def test_kubeconfig_problems_are_named(
    tmp_path: Path, cluster: dict[str, object], user: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(str(_kubeconfig(tmp_path / "kc", cluster, user)))


def test_yaml_kubeconfig(tmp_path: Path, ca: CertificateAuthority) -> None:
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    path = tmp_path / "kc.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.pem\n"
        "users:\n- name: u\n  user:\n    token: yaml-token\n"
        "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
    )
    assert load(str(path)).authorization() == "Bearer yaml-token"


def test_the_api_servers_date_bounds_this_nodes_clock_offset() -> None:
    from sidecar.kube.skew import offset_from_date

    date = "Mon, 23 Nov 2026 12:00:00 GMT"
    server = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC).timestamp()
    # Sent and received within the server's second: offset in [-1, +0.3], nothing certain.
    same = offset_from_date(date, server + 0.1, server + 0.3)
    assert same is not None and (same.low, same.high) == pytest.approx((-0.9, 0.3))
    assert not same.beyond(0.5)
    ahead = offset_from_date(date, server + 600.1, server + 600.2)
    assert ahead is not None and ahead.beyond(5) and ahead.estimate == pytest.approx(599.65)
    behind = offset_from_date(date, server - 30, server - 29.9)
    assert behind is not None and behind.beyond(5) and not behind.beyond(31)
    assert offset_from_date(None, 0, 0) is None
    assert offset_from_date("yesterday", 0, 0) is None


def test_http_dates_are_read_in_the_one_form_servers_send_and_nothing_else() -> None:
    from email.utils import parsedate_to_datetime

    from sidecar.kube.skew import parse_http_date

    for date in (
        "Mon, 23 Nov 2026 12:00:00 GMT",
        "Thu, 29 Feb 2024 23:59:59 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Wed, 01 Jan 2025 00:00:00 GMT",
    ):
        assert parse_http_date(date) == parsedate_to_datetime(date).timestamp(), date
    for bad in (
        "",
        "yesterday",
        "Mon, 23 Nov 2026 12:00:00 UTC",
        "Mon, 31 Feb 2026 12:00:00 GMT",
        "Mon, 23 Foo 2026 12:00:00 GMT",
        "Mon, 23 Nov 2026 12:00 GMT",
        "Monday, 23-Nov-26 12:00:00 GMT",
        "Mon, 23 Nov 2026 25:00:00 GMT",
    ):
        assert parse_http_date(bad) is None, bad
