"""The bodies of ``run``, ``status`` and ``cleanup``: settings in, exit code out."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ..core.defaults import MIN_SWEEP_MARGIN, PROG, SWEEP_MARGIN
from ..driver.elector import RBAC_FIX, Sidecar, resolve_namespace, store_for
from ..kit.logs import Logger
from ..kit.options import SIDECAR_ENV, Source
from ..kube.config import ApiConfig, ConfigError, load
from ..kube.errors import ApiError, Forbidden
from ..kube.events import EventRecorder, api_poster
from ..kube.leases import LeaseStore
from ..publish.statefile import StateDirError
from .settings import LockSettings, lock_settings, run_settings

#: ``cleanup`` watches expired-looking Leases at most this long before judging
#: (a Lease with a longer duration is left to the injector's sweep or a later run).
CLEANUP_MAX_WAIT = 300.0


def fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    settings = run_settings(args)  # SettingsError -> exit 2 in cli
    log = Logger(settings.log_level)
    try:
        config = load(settings.kubeconfig)
    except ConfigError as err:
        return fail(str(err), 2)
    namespace = resolve_namespace(settings.namespace, config)
    return asyncio.run(_run(settings, config, namespace, log))


def lock(args: argparse.Namespace) -> int:
    """``lock``: ``run`` with a command that runs only while leading (``sidecar.lock``)."""
    import shutil  # with tempfile, ~0.9 MB that ``run`` does not load
    import tempfile

    settings = lock_settings(args)  # SettingsError -> exit 2 in cli
    log = Logger(settings.run.log_level)
    try:
        config = load(settings.run.kubeconfig)
    except ConfigError as err:
        return fail(str(err), 2)
    namespace = resolve_namespace(settings.run.namespace, config)
    scratch = None
    run_settings_ = settings.run
    if settings.scratch_state_dir:  # a state dir of its own, removed at exit
        try:
            scratch = Path(tempfile.mkdtemp(prefix="grelmicro-lock-"))
        except OSError as err:
            return fail(
                f"lock: cannot create a state directory in {tempfile.gettempdir()} "
                f"({err.strerror}); mount a writable emptyDir and pass --state-dir",
                1,
            )
        run_settings_ = dataclasses.replace(run_settings_, state_dir=scratch)
    try:
        return asyncio.run(_run(run_settings_, config, namespace, log, settings))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


async def _run(
    settings: Any,
    config: ApiConfig,
    namespace: str,
    log: Logger,
    locking: LockSettings | None = None,
) -> int:
    store = store_for(settings, config, namespace)
    events = EventRecorder(
        api_poster(config, namespace, store.request_timeout), namespace, settings.identity, log
    )
    label = None
    if settings.label_pod:
        from ..core import defaults
        from ..driver.label import LeaderLabel
        from ..kube.pods import PodLabel

        pod = PodLabel(
            store.api,
            namespace,
            settings.label_pod,
            defaults.LEADER_LABEL,
            defaults.LEADER_LABEL_VALUE,
        )
        label = LeaderLabel(pod.put, settings.label_pod, log)
    sidecar = Sidecar(
        settings, namespace, store, log, source=config.source, events=events, label=label
    )
    try:
        await sidecar.start()
    except StateDirError as err:
        log.error(str(err))
        return fail(str(err), 1)
    except OSError as err:
        message = f"cannot listen on port {settings.port}: {err.strerror}; pick another with --port"
        log.error(message)
        return fail(message, 1)
    if locking is not None:
        from ..driver.lock import Lock

        return await Lock(sidecar, locking.command, locking.kill_grace, log).run()
    return await sidecar.run()


def lease_store(src: Source, all_namespaces: bool = False) -> tuple[LeaseStore, str]:
    """The Leases of ``status``/``cleanup`` and their namespace; ConfigError when unusable.

    The loader of ``run`` with kubectl's flags (``--context``, ``--as``,
    ``--as-group``), and a credential plugin allowed (through the official
    client, when installed). ``all_namespaces``: the store lists every
    namespace (``status -A``).
    """
    config = load(
        src.raw("kubeconfig") or None,
        src.raw("context") or None,
        as_user=src.raw("as") or None,
        as_groups=tuple(getattr(src.args, "as_group", None) or ()),
        plugins=True,
    )
    namespace = resolve_namespace(src.namespace(), config)
    return LeaseStore(config, "" if all_namespaces else namespace), namespace


def cleanup(args: argparse.Namespace) -> int:
    src = Source(args, SIDECAR_ENV)
    level = src.log_level("warning")
    margin = src.duration("margin", SWEEP_MARGIN, at_least=MIN_SWEEP_MARGIN)
    try:
        store, namespace = lease_store(src)
    except ConfigError as err:
        return fail(str(err), 2)
    log = Logger("info" if level == "warning" else level, namespace=namespace)

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
