"""The recorder: samples every sidecar's published state while chaos runs.

Three daemon threads:

- files: reads each ``state.json`` every ``file_interval`` (10 ms) and keeps
  every distinct version with the instant it was first seen;
- probes: ``GET /leader`` on each sidecar every ``probe_interval`` with a short
  timeout, keeping status and the body's ``updated_at``/``valid_until``;
- resources: open fds and RSS of every live sidecar process once a second.

Targets come and go while it runs (the ``churn`` fault starts candidates
under new names and stops others for good): ``add`` one, ``retire`` one whose
process has exited, read once more after the request, then no longer sampled.

It only observes; the checker (``checker.py``) judges. Test support only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .checker import FileVersion, Probe, Resource, parse_ts


class Target:
    """What the recorder needs of one sidecar: its name, file, port and current pid.

    ``skew``: how far the sidecar's wall clock is ahead of the host's (the
    ``skew`` fault runs it under libfaketime). Its application, on its node,
    would read ``valid_until`` with that same clock, so the recorder takes the
    skew out of every time it publishes: claims are judged in one time base.
    """

    def __init__(self, who: str, state_file: Path, port: int, pid: Callable[[], int | None]):
        self.who = who
        self.state_file = state_file
        self.port = port
        self.pid = pid
        self.skew = 0.0


def _unskew(state: dict[str, Any], skew: float) -> dict[str, Any]:
    """``state`` with its times (and each shard's ``valid_until``) in the host's time base."""
    if not skew:
        return state
    out = dict(state)
    for key in ("updated_at", "valid_until"):
        t = parse_ts(out.get(key))
        if t is not None:
            out[key] = dt.datetime.fromtimestamp(t - skew, dt.UTC).isoformat()
    if isinstance(shards := out.get("shards"), list):
        out["shards"] = [_unskew(e, skew) if isinstance(e, dict) else e for e in shards]
    return out


class Recorder:
    def __init__(
        self,
        targets: list[Target],
        file_interval: float = 0.01,
        probe_interval: float = 0.1,
        probe_timeout: float = 0.3,
        resource_interval: float = 1.0,
    ):
        self.targets = targets
        self.file_interval = file_interval
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.resource_interval = resource_interval
        self.versions: list[FileVersion] = []
        self.probes: list[Probe] = []
        self.resources: list[Resource] = []
        self.torn_reads = 0
        self.file_reads = 0
        self.max_file_lag = 0.0  # the longest pause between two passes over the files
        self._last: dict[str, bytes] = {}
        #: Each sidecar's latest version (the driver's live view, without a copy of all).
        self.latest: dict[str, FileVersion] = {}
        self._retiring: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._files, name="rec-files", daemon=True),
            threading.Thread(target=self._probes, name="rec-probes", daemon=True),
            threading.Thread(target=self._resources, name="rec-resources", daemon=True),
        ]

    def start(self) -> Recorder:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def add(self, target: Target) -> None:
        """Sample one more sidecar from now on (a candidate that joins mid-run)."""
        with self._lock:
            self.targets = [*self.targets, target]

    def retire(self, who: str) -> None:
        """Stop sampling ``who``, whose process has exited for good: its file is read
        once more (a pass that begins after this call), so its last version is kept,
        and that version goes on claiming in the checker until its ``valid_until``."""
        with self._lock:
            self._retiring.add(who)

    def _live(self) -> list[Target]:
        with self._lock:
            return self.targets

    # ---- live view for the chaos driver ---------------------------------------
    def snapshot(self) -> list[FileVersion]:
        """The state-file versions recorded so far (a copy; recording goes on)."""
        with self._lock:
            return list(self.versions)

    def leader_now(self) -> str | None:
        """The sidecar whose latest file claims right now (None if none or ambiguous); in a
        sharded election, the one that owns the most shards now (the first name of a tie)."""
        now = time.time()
        with self._lock:
            latest = list(self.latest.values())
        if any(v.shards is not None for v in latest):
            owns = sorted((-len(v.owns(now)), v.who) for v in latest if v.owns(now))
            return owns[0][1] if owns else None
        claiming = [
            v.who
            for v in latest
            if v.is_leader and v.valid_until is not None and v.valid_until > now
        ]
        return claiming[0] if len(claiming) == 1 else None

    def owners_now(self) -> dict[int, str]:
        """A sharded election: each shard owned right now, and by whom (the apps' view)."""
        now = time.time()
        with self._lock:
            latest = list(self.latest.values())
        return {shard: v.who for v in latest for shard in v.owns(now)}

    # ---- threads ---------------------------------------------------------------
    def _files(self) -> None:
        previous = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                leaving, self._retiring = self._retiring, set()
            for target in self._live():
                self._read(target)
            if leaving:
                with self._lock:
                    self.targets = [t for t in self.targets if t.who not in leaving]
            now = time.monotonic()
            self.max_file_lag = max(self.max_file_lag, now - previous)
            previous = now
            time.sleep(self.file_interval)

    def _read(self, target: Target) -> None:
        try:
            data = target.state_file.read_bytes()
        except OSError:
            return
        self.file_reads += 1
        if data == self._last.get(target.who):
            return
        seen = time.time()
        try:
            state = json.loads(data)
        except ValueError:
            self.torn_reads += 1
            return
        self._last[target.who] = data
        version = FileVersion.from_state(target.who, seen, _unskew(state, target.skew))
        with self._lock:
            self.versions.append(version)
            self.latest[target.who] = version

    def _probes(self) -> None:
        while not self._stop.is_set():
            for target in self._live():
                self._probe(target)
            time.sleep(self.probe_interval)

    def _probe(self, target: Target) -> None:
        sent = time.time()
        status, body = 0, b""
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=self.probe_timeout)
        try:
            conn.request("GET", "/leader")
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        updated = valid = None
        with contextlib.suppress(ValueError, AttributeError):
            data = _unskew(json.loads(body), target.skew)
            updated, valid = parse_ts(data.get("updated_at")), parse_ts(data.get("valid_until"))
        with self._lock:
            self.probes.append(Probe(target.who, sent, time.time(), status, updated, valid))

    def _resources(self) -> None:
        while not self._stop.is_set():
            for target in self._live():
                pid = target.pid()
                if pid is None:
                    continue
                sample = _resource(target.who, pid)
                if sample is not None:
                    with self._lock:
                        self.resources.append(sample)
            time.sleep(self.resource_interval)


def _resource(who: str, pid: int) -> Resource | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith(("T", "Z")):
        return None  # stopped or a zombie: not a sample of a running sidecar
    rss = int(fields.get("VmRSS", "0 kB").split()[0])
    return Resource(who, pid, time.time(), fds, rss)
