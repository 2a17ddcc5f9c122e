"""Lease naming and parsing, durations, settings validation, the state file."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.commands.settings import RunSettings, SettingsError, run_settings
from sidecar.core.durations import format_duration, parse_duration
from sidecar.core.lease import (
    HANDOFF_ANNOTATION,
    LeaseRecord,
    claim,
    format_microtime,
    lease_name,
    parse_time,
    vacate,
)
from sidecar.core.state import State
from sidecar.kit.options import SIDECAR_ENV, Source
from sidecar.publish.statefile import StateDirError, StateFile


@pytest.mark.parametrize(
    ("election", "lease"),
    [
        ("main", "leader-main"),
        ("My_App.v2", "leader-my-app-v2"),
        ("--a--b--", "leader-a-b"),
        ("ÉLU", "leader-lu"),
    ],
)
def test_lease_name(election: str, lease: str) -> None:
    assert lease_name(election) == lease


@pytest.mark.parametrize("election", ["", "---", "___", "é"])
def test_lease_name_empty_is_an_error(election: str) -> None:
    with pytest.raises(ValueError, match="no letters or digits"):
        lease_name(election)


@given(st.text(max_size=80))
def test_lease_name_is_always_a_valid_name_or_a_clear_error(election: str) -> None:
    try:
        name = lease_name(election)
    except ValueError as err:
        assert "election name" in str(err)
        return
    assert name.startswith("leader-") and "--" not in name and not name.endswith("-")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "holderIdentity",
                "leaseDurationSeconds",
                "acquireTime",
                "renewTime",
                "leaseTransitions",
            ]
        ),
        st.none() | st.integers() | st.text(max_size=20) | st.booleans() | st.floats(),
    )
)
def test_record_parsing_never_raises(spec: dict[str, object]) -> None:
    record = LeaseRecord.from_object(
        {"metadata": {"name": "leader-x", "resourceVersion": "1"}, "spec": spec}
    )
    assert record.transitions >= 0
    assert record.lease_duration is None or record.lease_duration >= 1


def test_record_from_non_dict_spec() -> None:
    record = LeaseRecord.from_object({"metadata": {"name": "x"}, "spec": "nonsense"})
    assert record.holder is None and record.problems


def test_claim_keeps_foreign_labels_and_annotations() -> None:
    obj = {
        "metadata": {
            "name": "leader-x",
            "namespace": "ns",
            "resourceVersion": "9",
            "labels": {"team": "a"},
            "annotations": {"note": "keep"},
        },
        "spec": {
            "holderIdentity": "",
            "leaseTransitions": 4,
            "acquireTime": "2026-01-01T00:00:00Z",
        },
    }
    now = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    body = claim(
        LeaseRecord.from_object(obj),
        name="leader-x",
        namespace="ns",
        identity="me",
        lease_duration=15,
        now=now,
    )
    assert body["metadata"]["labels"] == {"team": "a", "app.kubernetes.io/managed-by": "grelmicro"}
    assert body["metadata"]["annotations"] == {"note": "keep"}
    assert body["metadata"]["resourceVersion"] == "9"
    assert body["spec"]["leaseTransitions"] == 5
    assert body["spec"]["renewTime"] == "2026-02-01T00:00:00.000000Z"
    released = vacate(LeaseRecord.from_object(body), now=now)
    assert (
        released["spec"]["holderIdentity"] == "" and released["spec"]["leaseDurationSeconds"] == 1
    )
    assert released["spec"]["leaseTransitions"] == 5
    handoff = vacate(LeaseRecord.from_object(body), now=now, successor="next")
    assert handoff["metadata"]["annotations"] == {"note": "keep", HANDOFF_ANNOTATION: "me"}
    handed = LeaseRecord.from_object(handoff)
    assert (handed.holder, handed.lease_duration, handed.handoff_from) == ("next", 1, "me")
    # The successor's claim keeps what others wrote and drops the hand-off marker.
    taken = claim(
        handed, name="leader-x", namespace="ns", identity="next", lease_duration=15, now=now
    )
    assert taken["metadata"]["annotations"] == {"note": "keep"}
    assert taken["spec"]["leaseTransitions"] == 6


def test_microtime_format() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=dt.UTC)
    assert format_microtime(when) == "2026-01-02T03:04:05.006789Z"


@given(st.integers(min_value=1, max_value=10**7))
def test_duration_roundtrip(millis: int) -> None:
    assert parse_duration(format_duration(millis / 1000)) == pytest.approx(millis / 1000)


def _args(**kw: object) -> argparse.Namespace:
    base = {
        k: None
        for k in (
            "election",
            "namespace",
            "identity",
            "lease_duration",
            "renew_deadline",
            "retry_period",
            "state_dir",
            "port",
            "kubeconfig",
            "log_level",
        )
    }
    base.update(kw)
    return argparse.Namespace(**base)


def settings_of(args: argparse.Namespace, environ: dict[str, str] | None = None) -> RunSettings:
    return run_settings(Source(args, SIDECAR_ENV, environ or {}))


def test_settings_defaults() -> None:
    s = settings_of(_args(election="main"), {"POD_NAME": "pod-0"})
    assert (s.lease, s.identity, s.port, str(s.state_dir)) == (
        "leader-main",
        "pod-0",
        4040,
        "/var/run/leader-election",
    )
    assert (s.timing.lease_duration, s.timing.renew_deadline, s.timing.retry_period) == (15, 10, 2)


def test_settings_from_env_and_flag_wins() -> None:
    env = {"GRELMICRO_SIDECAR_ELECTION": "from-env", "GRELMICRO_SIDECAR_RETRY_PERIOD": "500ms"}
    assert settings_of(_args(), env).election == "from-env"
    assert settings_of(_args(), env).timing.retry_period == 0.5
    assert settings_of(_args(election="flag"), env).election == "flag"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "--election is required"),
        (
            {"election": "main", "lease_duration": "15"},
            "--lease-duration='15' is not valid; expected a duration such as 15s",
        ),
        (
            {"election": "main", "lease_duration": "5s"},
            "--lease-duration=5s must be greater than renew-deadline 10s (the default)",
        ),
        (
            {"election": "main", "retry_period": "9s"},
            "must be greater than 1.2 × --retry-period=9s",
        ),
        (
            {"election": "main", "port": "70000"},
            "--port='70000' is not valid; expected a port number from 1 to 65535, or 0 to disable",
        ),
        ({"election": "main", "port": "http"}, "--port='http'"),
        (
            {"election": "main", "log_level": "loud"},
            "--log-level='loud' is not valid; expected one of debug, info, warning, error",
        ),
        ({"election": "---"}, "no letters or digits"),
        (
            {"election": "main", "lease_duration": "15500ms", "renew_deadline": "10s"},
            "whole number",
        ),
    ],
)
def test_settings_errors_name_the_flag_and_rule(kw: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        settings_of(_args(**kw))
    assert message in str(err.value)


def test_state_file_is_replaced_atomically(tmp_path: Path) -> None:
    sf = StateFile(tmp_path / "state")
    sf.check_writable()
    follower = State(
        election="main", namespace="ns", lease="leader-main", identity="pod-0",
        is_leader=False, holder=None, fencing_token=None, acquired_at=None,
        renewed_at=None, valid_until=None, updated_at="a",
    )  # fmt: skip
    assert sf.write(follower)
    assert not sf.write(dataclasses.replace(follower, updated_at="b"))  # only the stamp changed
    assert sf.write(dataclasses.replace(follower, is_leader=True, updated_at="c"))
    assert json.loads((tmp_path / "state" / "state.json").read_text())["is_leader"] is True
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["state.json"]


def test_state_file_syncs_what_leadership_rests_on_not_a_followers_news(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38, 50 and 500 candidates: every follower rewrote and fsynced its file (twice: the
    file, the directory) for each new holder, in the same milliseconds as the successor's claim,
    its event loop held in disk I/O meanwhile. The rename alone keeps a reader from a torn
    file; a sync only matters to what survives a power loss, and a follower's file never claims.
    So: synced are the first write (it replaces a crashed run's), every write that says
    "leading", and the first that stops saying it; a follower's new holder is not."""
    import sidecar.publish.statefile as statefile

    synced: list[int] = []
    monkeypatch.setattr(statefile.os, "fsync", lambda fd: synced.append(fd))
    sf = StateFile(tmp_path / "state")
    sf.check_writable()
    follower = State(
        election="main", namespace="ns", lease="leader-main", identity="pod-0",
        is_leader=False, holder="pod-1", fencing_token=None, acquired_at="t1",
        renewed_at=None, valid_until=None, updated_at="a",
    )  # fmt: skip

    def syncs(state: State, **changes: object) -> int:
        synced.clear()
        assert sf.write(dataclasses.replace(state, **changes))
        return len(synced)

    assert syncs(follower) == 2  # the first: whatever a crashed run left is replaced for good
    assert syncs(follower, holder="pod-2", acquired_at="t2") == 0  # news, not a claim
    leading = dict(is_leader=True, holder="pod-0", fencing_token=7, valid_until="v1")
    assert syncs(follower, **leading) == 2
    assert syncs(follower, **leading | {"valid_until": "v2"}) == 2  # a renew: still a claim
    assert syncs(follower, holder="pod-0", acquired_at="t3") == 2  # the step-down
    assert syncs(follower, holder="pod-3", acquired_at="t4") == 0
    assert json.loads((tmp_path / "state" / "state.json").read_text())["holder"] == "pod-3"
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["state.json"]


def test_state_dir_that_cannot_exist(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError, match="cannot be created"):
        StateFile(tmp_path / "file" / "sub").check_writable()


def test_time_parser_refuses_what_is_not_rfc3339() -> None:
    for bad in [
        "yesterday",
        "",
        "2024-13-45T99:00:00Z",
        "2024-01-01T00:00:00",
        "1700000000",
        None,
        5,
        [],
        {},
    ]:
        assert parse_time(bad) is None, bad
    assert parse_time("2024-01-01T00:00:00.123456Z") == dt.datetime(
        2024, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC
    )
    assert parse_time("2024-01-01T02:00:00+02:00") == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
