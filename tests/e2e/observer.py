"""What each app container saw of leadership, recorded by the app itself, and checked.

The e2e workloads run an app that asks its sidecar ``GET $LEADER_ELECTION_URL``
five times a second and prints one line per answer: the wall-clock time the
request was sent, the time the answer came back, the status code and the
fencing token. ``Views`` follows every pod's app log while a test disturbs the
workload (pods deleted, rolled, killed, frozen), so the record survives the
pods it came from.

``overlaps`` is the safety check, sound for sampled views: an app's 200 answer
is a violation when it lies wholly inside another pod's run of leadership, that
is between two consecutive 200 answers of that pod with the same fencing token,
close enough together (``RUN_BOUND``) that the pod cannot have stepped down and
come back in between. ``handovers`` measures, from the apps' side, how long no
app was told it leads whenever leadership moved from one pod to another.
All pods share one machine's clock (one node here; kind's nodes share the host's).
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.e2e.conftest import Cluster

# POSIX sh, curl, sed, date: present in curlimages/curl and in our Debian stand-in. One view:
# ask, then log the line ``parse`` reads; the answer stays in ``$out`` for what comes next.
ASK_AND_LOG = r"""
  s=$(date +%s.%N)
  out=$(curl -s -m 1 -w '\n%{http_code}' "$LEADER_ELECTION_URL" 2>/dev/null)
  r=$(date +%s.%N)
  code=$(printf '%s\n' "$out" | tail -n 1)
  token=$(printf '%s\n' "$out" | sed -n 's/.*"fencing_token": *\([0-9][0-9]*\).*/\1/p' | head -n 1)
  echo "view $s $r ${code:-000} ${token:--}"
"""
OBSERVER_SCRIPT = f"""
trap 'exit 0' TERM
while true; do{ASK_AND_LOG}  sleep 0.2
done
"""

# Two consecutive 200 answers of one pod closer than this cover the time between them.
RUN_BOUND = 1.0


@dataclass(frozen=True)
class Answer:
    sent: float
    received: float
    code: str
    token: int | None

    @property
    def leads(self) -> bool:
        return self.code == "200"


def parse(log: str) -> list[Answer]:
    answers = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) != 5 or parts[0] != "view":
            continue
        token = None if parts[4] == "-" else int(parts[4])
        answers.append(Answer(float(parts[1]), float(parts[2]), parts[3], token))
    return answers


def _runs(answers: list[Answer]) -> Iterator[tuple[Answer, Answer]]:
    """Consecutive pairs of 200 answers with one token, close enough to cover the time between."""
    for first, second in itertools.pairwise(answers):
        if (
            first.leads
            and second.leads
            and first.token == second.token
            and second.sent - first.received <= RUN_BOUND
        ):
            yield first, second


def overlaps(views: dict[str, list[Answer]]) -> list[str]:
    """Every 200 answer given to one app while another app's pod was surely leading."""
    found = []
    for pod, answers in views.items():
        for other, other_answers in views.items():
            if other == pod:
                continue
            for first, second in _runs(other_answers):
                for answer in answers:
                    if (
                        answer.leads
                        and first.received <= answer.sent
                        and answer.received <= second.sent
                    ):
                        found.append(
                            f"{pod} was told it leads (token {answer.token}) at "
                            f"{answer.sent:.3f}-{answer.received:.3f} while {other} led "
                            f"(token {first.token}) from {first.received:.3f} to {second.sent:.3f}"
                        )
    return found


def handovers(views: dict[str, list[Answer]]) -> list[tuple[str, str, float]]:
    """(from pod, to pod, seconds no app was told it leads) for each change of leader pod.

    The gap is an upper bound: from the last 200 answer the old leader's app got
    to the first one the new leader's app asked for.
    """
    leading = sorted(
        (a.sent, a.received, pod) for pod, answers in views.items() for a in answers if a.leads
    )
    out = []
    for (_, received, pod), (sent, _, nxt) in itertools.pairwise(leading):
        if nxt != pod:
            out.append((pod, nxt, max(0.0, sent - received)))
    return out


def leaderless(views: dict[str, list[Answer]]) -> list[tuple[float, float]]:
    """Every stretch in which no app was told it leads, (from, to), longest first: from a
    200 answer to the next one, whichever pods answered (a leader that stops and comes back
    counts, where ``handovers`` sees only a change of pod)."""
    leading = sorted((a.sent, a.received) for answers in views.values() for a in answers if a.leads)
    gaps = [(received, sent) for (_, received), (sent, _) in itertools.pairwise(leading)]
    return sorted((g for g in gaps if g[1] > g[0]), key=lambda g: g[0] - g[1])


@dataclass
class Views:
    """Follows the app log of every pod labelled ``app.kubernetes.io/name=NAME``."""

    e2e: Cluster
    namespace: str
    name: str
    logs: dict[str, list[str]] = field(default_factory=dict)
    _followers: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def answers(self) -> dict[str, list[Answer]]:
        return {pod: parse("\n".join(lines)) for pod, lines in list(self.logs.items())}

    def since(self, moment: float) -> dict[str, list[Answer]]:
        return {
            pod: [a for a in answers if a.sent >= moment] for pod, answers in self.answers().items()
        }

    def _follow(self, pod: str) -> None:
        cmd = self.e2e.command("logs", "-f", "-n", self.namespace, pod, "-c", "app")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._followers[pod] = proc
        lines = self.logs.setdefault(pod, [])

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _watch_pods(self) -> None:
        while not self._stop.is_set():
            try:
                pods: list[dict[str, Any]] = self.e2e.json(
                    "get", "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/name={self.name}"
                )["items"]
            except AssertionError:
                pods = []
            for pod in pods:
                name = pod["metadata"]["name"]
                statuses = pod.get("status", {}).get("containerStatuses") or []
                started = any(
                    c["name"] == "app" and c.get("state", {}).get("running") for c in statuses
                )
                if started and name not in self._followers:
                    self._follow(name)
            self._stop.wait(0.3)

    @contextmanager
    def recording(self) -> Iterator[Views]:
        watcher = threading.Thread(target=self._watch_pods, daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            self._stop.set()
            watcher.join(10)
            time.sleep(0.5)  # let the followers pass on what the apps printed last
            for proc in self._followers.values():
                proc.terminate()
            for thread in self._threads:
                thread.join(5)
