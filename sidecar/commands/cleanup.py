"""``cleanup``: the sweep of contract §5 once, for a namespace, trusting no clock."""

from __future__ import annotations

import asyncio
import sys

from ..kit.logs import Logger
from ..kit.options import LOG_LEVEL, MARGIN, Source
from ..kube.config import ConfigError
from ..kube.errors import RBAC_FIX, ApiError, Forbidden
from . import fail
from .human import lease_store

#: ``cleanup`` watches expired-looking Leases at most this long before judging
#: (a Lease with a longer duration is left to the injector's sweep or a later run).
CLEANUP_MAX_WAIT = 300.0


def cleanup(src: Source) -> int:
    level, margin = src.get(LOG_LEVEL), src.get(MARGIN)
    try:
        store, namespace = lease_store(src)
    except ConfigError as err:
        return fail(str(err), 2)
    log = Logger(level, namespace=namespace)

    async def go() -> int:
        from ..driver.sweep import Sightings, sweep

        sightings = Sightings()
        try:
            # No clock is trusted (contract §5): a Lease that looks expired is
            # watched until it has stayed unchanged for its duration + margin.
            result = await sweep(store, log, sightings=sightings, margin=margin)
            if result.kept_unconfirmed:
                wait = min(result.confirm_in, CLEANUP_MAX_WAIT)
                print(
                    f"watching {result.kept_unconfirmed} expired-looking lease(s) for "
                    f"{wait:.0f}s to confirm nobody renews them",
                    file=sys.stderr,
                    flush=True,
                )
                await asyncio.sleep(wait)
                result = await sweep(store, log, sightings=sightings, margin=margin)
        finally:
            store.close()
        print(
            f"deleted {len(result.deleted)} expired lease(s); kept {result.kept_live} live, "
            f"{result.kept_unreadable} unreadable, {result.kept_unconfirmed} not yet confirmed; "
            f"{result.skipped_changed} changed under us"
        )
        if result.errors:
            # The sweep went on past each failure (logged above); the job is not done.
            return fail(
                f"could not delete {result.errors} expired lease(s) in {namespace} "
                "(the warnings above say why); if forbidden, allow delete on "
                "leases.coordination.k8s.io for this account",
                1,
            )
        return 0

    try:
        return asyncio.run(go())
    except Forbidden as err:
        return fail(f"forbidden: cannot {err.verb} leases in {namespace}; {RBAC_FIX}", 1)
    except ApiError as err:
        return fail(f"cleanup failed in {namespace}: {err}", 1)
