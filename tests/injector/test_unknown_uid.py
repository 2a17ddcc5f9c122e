"""The injector runs under a UID that has no passwd entry, as the chart's pods do (65532).

A real node exposed this: kopf derives its peering identity from
``getpass.getuser()``, which raises ``KeyError`` for a UID unknown to
``/etc/passwd`` (and no ``USER`` in the environment), so the injector crashed
at start in every pod the chart made.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from tests.cluster import ControlPlane
from tests.injector.conftest import Injector, Tls


def _uid_without_passwd_entry() -> int:
    for uid in (65532, 65531, 65530, 54321):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("every candidate UID has a passwd entry on this machine")


def test_injector_starts_under_a_uid_with_no_passwd_entry(
    cluster: ControlPlane, tls: Tls, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the injector as another UID")
    uid = _uid_without_passwd_entry()
    # The files a pod would mount, readable by that UID only.
    mine = tmp_path / "as-uid"
    mine.mkdir()
    for src in (cluster.kubeconfig, tls.cert, tls.key):
        shutil.copy(src, mine / Path(src).name)
    for path in (mine, *mine.iterdir()):
        os.chown(path, uid, uid)
    log = tmp_path / "injector.log"
    injector = Injector(
        cluster,
        Tls(tls.ca_pem, mine / tls.cert.name, mine / tls.key.name),
        log,
        kubeconfig=mine / Path(cluster.kubeconfig).name,
    )
    try:
        injector.start(uid=uid)
    finally:
        code = injector.stop()
    assert code == 0, injector.tail()
    assert "getpwuid" not in log.read_text()
