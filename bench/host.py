"""Many sidecar candidates in one process, each wired and run as ``grelmicro-sidecar run`` does.

``python -m bench.host SPEC [--stagger SECONDS]``: bench-only. SPEC has one
candidate a line, tab-separated: namespace, election, identity, kubeconfig,
state dir. 3,000 sidecar processes would need about 78 GB of RSS; the
thousand-elections scenario (``bench.thousand``) hosts hundreds of candidates
per process instead, and this module is what keeps their requests the
sidecar's own:

- each candidate's settings come from the CLI's own parser and
  ``run_settings`` (``run --election ... --port=0``: no HTTP server, no pod);
- each runs the command's own ``sidecar.commands.run._serve``: its own
  kubeconfig and client certificate, its own ``LeaseStore`` (its own
  keep-alive connection and its own watch), wired by ``commands.wiring.wire``;
- the only change is the signal handling: ``_serve`` installs a SIGTERM
  handler per candidate, which in one loop would stop only the last one; here
  one handler stops every candidate (each ``elector.stop()``, as a sidecar's
  first SIGTERM does) and the process exits once all have stopped.

All candidates of a process share one event loop and one CPU, which a set of
real sidecars would not: what this measures is the API server's side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from sidecar.commands import run as sidecar_run
from sidecar.commands.cli import build_parser
from sidecar.commands.settings import run_settings
from sidecar.commands.wiring import Sidecar
from sidecar.kit.logs import Logger
from sidecar.kit.options import SIDECAR_ENV, Source
from sidecar.kube.config import load


def read_spec(path: Path) -> list[list[str]]:
    """The candidates of ``path``: [namespace, election, identity, kubeconfig, state dir]."""
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    bad = [r for r in rows if len(r) != 5]
    if bad:
        raise SystemExit(f"bench.host: {path}: expected 5 tab-separated fields, got {bad[0]}")
    return rows


def argv(row: list[str]) -> list[str]:
    namespace, election, identity, kubeconfig, state_dir = row
    return [
        "run", f"--election={election}", f"--namespace={namespace}", f"--identity={identity}",
        f"--kubeconfig={kubeconfig}", f"--state-dir={state_dir}", "--port=0",
    ]  # fmt: skip


async def serve(rows: list[list[str]], stagger: float) -> int:
    sidecars: list[Sidecar] = []
    stopping = asyncio.Event()

    def keep(sidecar: Sidecar, _log: Logger) -> None:  # in place of one handler per candidate
        sidecars.append(sidecar)
        if stopping.is_set():
            sidecar.elector.stop()

    sidecar_run._handle_signals = keep  # type: ignore[assignment]

    def on_signal() -> None:
        if stopping.is_set():
            os._exit(1)  # a second signal: out now
        stopping.set()
        for sc in sidecars:
            sc.elector.stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    parser = build_parser()
    tasks = []
    for row in rows:
        if stopping.is_set():
            break
        settings = run_settings(Source(parser.parse_args(argv(row)), SIDECAR_ENV, {}))
        tasks.append(asyncio.create_task(sidecar_run._serve(settings, load(row[3]), None)))
        await asyncio.sleep(stagger)
    codes = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [c for c in codes if c != 0]
    if failed:
        print(f"bench.host: {len(failed)} candidates ended with {failed[:3]}", file=sys.stderr)
    return 1 if failed else 0


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host", description=__doc__)
    parser.add_argument("spec", type=Path)
    parser.add_argument("--stagger", type=float, default=0.02, help="seconds between starts")
    opts = parser.parse_args(args)
    return asyncio.run(serve(read_spec(opts.spec), opts.stagger))


if __name__ == "__main__":
    sys.exit(main())
