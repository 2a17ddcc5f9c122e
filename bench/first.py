"""A brand-new election's first leader, as processes: ``n`` fresh candidates started at once.

What "3 replicas created -> first leader" measures with real pods (``bench.pods``),
without a node, so that ``python -m bench --quick`` reports it too: no Lease of
the election exists yet and never did; all ``n`` are started back to back; the
time is from the first ``Popen`` to the ``updated_at`` of the first "leading"
state file.
"""

from __future__ import annotations

import time
from pathlib import Path

from .harness import Credentials, Impl, Pool, wait_until


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def first_leader(
    impl: Impl, workdir: Path, creds: Credentials, *, n: int, runs: int
) -> list[float]:
    out = []
    for i in range(runs):
        pool = Pool(impl, f"first-{i}", workdir, creds, prefix=f"first{i}")
        try:
            for _ in range(n):
                creds.kubeconfig(f"bench:{impl.key}:first{i}-{_}")  # signed before the clock starts
            for _ in range(n):
                pool.spawn()
            began = min(c.started_wall for c in pool.members)

            def led(pool: Pool = pool) -> float | None:
                ts = [t for c in pool.members if (t := c.leading_since()) is not None]
                return min(ts) if ts else None

            t: float = wait_until(led, 60, 0.005, f"a first {impl.key} leader")
            out.append(t - began)
            _log(f"  {impl.key}: {n} fresh candidates -> first leader in {out[-1] * 1000:.0f} ms")
        finally:
            pool.stop()
    return out


def markdown(first: dict[str, list[float]], labels: dict[str, str]) -> str:
    """The scenario's table: each implementation's runs, p50 and max."""
    from .figures import ms, summary

    lines = [
        "### First leader of a brand-new election, processes\n",
        "3 fresh candidates started at once on an election that never had a Lease (as a new "
        "3-replica Deployment's pods, without the node): from the first `Popen` to the first "
        '"leading" state file (`bench/first.py`).\n',
        "| implementation | runs | p50 | max | each |",
        "|---|---|---|---|---|",
    ]
    for key, runs in first.items():
        s = summary(runs)
        each = ", ".join(ms(x) for x in runs)
        lines.append(
            f"| {labels.get(key, key)} | {len(runs)} | {ms(s.get('p50'))} | {ms(s.get('max'))} | {each} |"
        )
    return "\n".join(lines) + "\n"
