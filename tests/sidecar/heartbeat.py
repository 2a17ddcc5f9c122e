"""A command for ``lock`` tests: proves when it ran by appending heartbeats to a file.

``python heartbeat.py FILE [--every S] [--exit-after S] [--code N] [--on-term exit|ignore]``

Every ``S`` seconds (default 0.02) it appends ``<time.time()> <fencing token>``
to FILE; the first line is ``start ...`` and, on SIGTERM, ``term ...`` (then it
exits 0 after 0.2 s, or keeps beating with ``--on-term ignore``); SIGHUP, SIGUSR1
and SIGUSR2 are recorded by name. Test support.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--every", type=float, default=0.02)
    parser.add_argument("--exit-after", type=float, default=None)
    parser.add_argument("--code", type=int, default=0)
    parser.add_argument("--on-term", choices=("exit", "ignore"), default="exit")
    args = parser.parse_args()
    token = os.environ.get("LEADER_ELECTION_FENCING_TOKEN", "-")
    out = open(args.file, "a", buffering=1)  # noqa: SIM115
    termed: list[float] = []
    # Handlers only note the signal; the loop writes it. A handler that wrote to ``out``
    # itself could run inside the loop's own write: "reentrant call", a traceback, no beats.
    received: list[tuple[str, float]] = []

    def on_signal(sig: int, _frame: object) -> None:
        received.append((signal.Signals(sig).name, time.time()))
        if sig == signal.SIGTERM:
            termed.append(time.monotonic())

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, on_signal)  # SIGTERM: "term", then exits or beats on; others recorded
    print(f"heartbeat: started with fencing token {token}", flush=True)  # lock's stdout is ours
    out.write(
        f"start {time.time()!r} {token} {os.environ.get('LEADER_ELECTION_STATE_FILE', '-')}\n"
    )
    start = time.monotonic()
    while True:
        while received:
            name, at = received.pop(0)
            out.write(f"{'term' if name == 'SIGTERM' else name} {at!r} {token}\n")
        out.write(f"beat {time.time()!r} {token}\n")
        now = time.monotonic()
        if termed and args.on_term == "exit" and now - termed[0] > 0.2:
            return 0
        if args.exit_after is not None and now - start > args.exit_after:
            return args.code
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
