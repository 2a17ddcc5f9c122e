"""The leader's application as a user would write it, and how long it pauses within one term.

Issue 38 (item 3): an app that acts only while ``is_leader`` is true and
``valid_until`` is ahead of its own clock, in the 3-replica Deployment of the
e2e tests, was seen to pause for hundreds of milliseconds in each ``kubectl
rollout restart`` while its term went on. Whether that is the election (the
file said "not leader", or ``valid_until`` ran out before the renewed one was
written, or the file could not be read) or the app not getting to run at all
(pods starting on a 2-core node) is told apart here, by the app itself.

``APP`` runs in the product image (it has Python) as the pod's app container,
reads ``$LEADER_ELECTION_STATE_FILE`` every 50 ms and logs one JSON line per
transition or anomaly only, so a quiet leader prints nothing:

- ``start`` / ``stop``: acting begins or ends (``stop`` says why: ``not_leader``,
  ``expired``, ``unreadable``), with the file's token, ``is_leader``,
  ``valid_until`` and the app's clock;
- ``renew``: ``valid_until`` moved while acting, with how much of the old one
  was left when the new one was read;
- ``late``: one iteration took more than 100 ms beyond its 50 ms sleep, with the
  time the process spent runnable but not running over it (``run_delay``, from
  ``/proc/self/schedstat``): CPU starvation of the app, not the election;
- ``pause``: acting again in the same term more than 100 ms after the last
  acting instant, with what the loop met in between.

``AppLogs`` reads those lines from the kubelet's log files on this machine (no
``kubectl logs`` process per pod: their start costs CPU at the very moments
measured), keeping each file open so a deleted pod's last lines are still read.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The app: standard library only, exits at once on SIGTERM (as PID 1 it would ignore it).
APP = r"""
import json, os, signal, sys, time
from datetime import datetime

signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
PATH = os.environ["LEADER_ELECTION_STATE_FILE"]
PERIOD, LATE = 0.05, 0.1

def run_delay():
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return -1.0

def epoch(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None

def log(ev, **fields):
    sys.stdout.write(json.dumps({"ev": ev, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()

acting, token, valid, last_act = False, None, None, None
met, over_sum, rd_sum = {}, 0.0, 0.0  # what the loop met since the last acting instant
before, rd_before = time.time(), run_delay()
log("app", pid=os.getpid(), t=before)
while True:
    t0 = time.time()
    detail = None
    try:
        with open(PATH, "rb") as f:
            state = json.loads(f.read())
        leader, tok = state.get("is_leader") is True, state.get("fencing_token")
        vu = epoch(state.get("valid_until"))
        why = None
    except Exception as err:
        leader, vu, tok, state, why = False, None, None, {}, "unreadable"
        detail = f"{type(err).__name__}: {err}"
    now = time.time()
    if why is None:
        why = "not_leader" if not leader else ("expired" if vu is None or now >= vu else None)
    file = {"token": tok, "is_leader": leader, "valid_until": vu,
            "updated_at": epoch(state.get("updated_at"))}
    if why is None:
        if last_act is not None and tok == token and now - last_act > LATE:
            log("pause", t=now, last_act=last_act, gap=now - last_act, token=tok, met=met,
                over=over_sum, run_delay=rd_sum)
        if not acting:
            log("start", t=now, **file)
        elif vu != valid:
            log("renew", t=now, token=tok, old=valid, new=vu, left=valid - now if valid else None)
        acting, token, valid, last_act = True, tok, vu, now
        met, over_sum, rd_sum = {}, 0.0, 0.0
    else:
        met[why] = met.get(why, 0) + 1
        if acting:
            log("stop", t=now, last_act=last_act, last_token=token, reason=why,
                read_s=now - t0, error=detail, **file)
            acting = False
    time.sleep(PERIOD)
    after, rd = time.time(), run_delay()
    over = after - before - PERIOD - (now - t0)
    over_sum, rd_sum = over_sum + max(0.0, over), rd_sum + rd - rd_before
    if over > LATE:
        log("late", t=after, prev=before, over=over, read_s=now - t0, run_delay=rd - rd_before,
            acting=acting)
        met["late"] = met.get("late", 0) + 1
    before, rd_before = after, rd
"""


def app_container(image: str) -> dict[str, Any]:
    """The Deployment's app container, running ``APP`` instead of the curl observer."""
    return {
        "name": "app",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", APP],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _cri_line(raw: str) -> dict[str, Any] | None:
    """The app's JSON record in one line of a CRI log file (``<time> stdout F <line>``)."""
    parts = raw.rstrip("\n").split(" ", 3)
    if len(parts) != 4 or parts[2] != "F":
        return None
    try:
        record = json.loads(parts[3])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "ev" in record else None


class AppLogs:
    """Every ``app`` container's records in one namespace, read from the kubelet's log files."""

    def __init__(self, pod_logs: Path, namespace: str) -> None:
        self.pod_logs, self.namespace = pod_logs, namespace
        self.records: list[dict[str, Any]] = []
        self._files: dict[Path, tuple[Any, str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.is_set():
            self._scan()
            self._stop.wait(0.1)
        self._scan()

    def _scan(self) -> None:
        for path in self.pod_logs.glob(f"{self.namespace}_*/app/*.log"):
            if path not in self._files:
                try:
                    pod = path.parent.parent.name.split("_")[1]
                    self._files[path] = (path.open(), pod, "")
                except OSError:
                    continue
        for path, (handle, pod, partial) in list(self._files.items()):
            text = partial + handle.read()
            *lines, rest = text.split("\n")
            self._files[path] = (handle, pod, rest)
            for line in lines:
                record = _cri_line(line)
                if record is not None:
                    record["pod"] = pod
                    self.records.append(record)

    def between(self, start: float, end: float) -> list[dict[str, Any]]:
        return [r for r in list(self.records) if start <= r.get("t", 0) <= end]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for handle, _, _ in self._files.values():
            handle.close()


@dataclass(frozen=True)
class Pause:
    """A stretch in one term during which the leader's app did not act."""

    pod: str
    token: int | None
    at: float
    gap: float
    cause: str
    met: dict[str, int]
    #: How much of the gap the app's loop spent beyond its sleeps and reads, and runnable
    #: but not running (``/proc/self/schedstat``).
    over: float
    run_delay: float


#: What a pause is put down to, by what the loop met in it: the file first, else the app's
#: own loop, which took the time (``late`` also when it overslept by less than 100 ms).
CAUSES = ("unreadable", "not_leader", "expired", "late")


def pauses(records: list[dict[str, Any]]) -> list[Pause]:
    """Every ``pause`` record, put down to (d) the file unreadable, (b) it said "not
    leader", (c) ``valid_until`` had passed, else (a) the app's own loop was late."""
    out = []
    for r in records:
        if r.get("ev") != "pause":
            continue
        met = {str(k): int(v) for k, v in (r.get("met") or {}).items()}
        cause = next((c for c in CAUSES[:3] if met.get(c)), "late")
        out.append(
            Pause(
                r["pod"],
                r.get("token"),
                r["last_act"],
                r["gap"],
                cause,
                met,
                r.get("over", 0.0),
                r.get("run_delay", 0.0),
            )
        )
    return out


def lateness(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every ``late`` record: when, which pod, how late, and how much of it runnable."""
    return [
        {
            "pod": r["pod"],
            "t": round(r["t"], 3),
            "over_s": round(r["over"], 3),
            "run_delay_s": round(r["run_delay"], 3),
            "read_s": round(r["read_s"], 3),
            "acting": r["acting"],
        }
        for r in records
        if r.get("ev") == "late"
    ]


def window(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One window's figures: the longest same-term pause, the causes of those over 100 ms,
    the renews' margins and every lateness line (the evidence)."""
    found = pauses(records)
    counts = dict.fromkeys(CAUSES, 0)
    for p in found:
        counts[p.cause] += 1
    late = lateness(records)
    renews = [r["left"] for r in records if r.get("ev") == "renew" and r.get("left") is not None]
    stops = [
        {k: r.get(k) for k in ("pod", "t", "token", "reason", "is_leader", "valid_until")}
        for r in records
        if r.get("ev") == "stop"
    ]
    longest = max(found, key=lambda p: p.gap, default=None)
    return {
        "longest_pause_s": round(longest.gap, 3) if longest else 0.0,
        "longest_pause": longest.__dict__ if longest else None,
        "pauses": [
            dict(
                p.__dict__,
                gap=round(p.gap, 3),
                over=round(p.over, 3),
                run_delay=round(p.run_delay, 3),
            )
            for p in found
        ],
        "causes": counts,
        "late_lines": len(late),
        "late_acting_lines": sum(1 for x in late if x["acting"]),
        "max_late_s": max((x["over_s"] for x in late), default=0.0),
        "late": late,
        "renew_left_min_s": round(min(renews), 3) if renews else None,
        "renews": len(renews),
        "stops": stops,
    }
