"""``run`` and ``lock``: settings in, a wired elector run until a signal, exit code out."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from pathlib import Path

from ..core import defaults
from ..driver.metrics import process_age
from ..kit.logs import Logger
from ..kit.options import Source
from ..kube.api import PodLabel, api_poster
from ..kube.config import ApiConfig, ConfigError, load, resolve_namespace
from ..kube.leases import LeaseStore
from ..publish.statefile import StateDirError
from . import fail, take_held
from .settings import LockSettings, RunSettings, lock_settings, run_settings
from .wiring import ShardedSidecar, Sidecar, wire, wire_shards


def run(src: Source) -> int:
    return _main(run_settings(src))  # a SettingsError is exit 2 in cli


def lock(src: Source) -> int:
    """``lock``: ``run`` with a command that runs only while leading (``driver.lockcommand``)."""
    settings = lock_settings(src)
    return _main(settings.run, settings)


def _main(settings: RunSettings, command: LockSettings | None = None) -> int:
    try:
        config = load(settings.kubeconfig)
    except ConfigError as err:
        return fail(str(err), 2)
    if command is None or not command.scratch_state_dir:
        return asyncio.run(_serve(settings, config, command))
    import shutil  # with tempfile: modules that ``run`` does not load
    import tempfile

    try:  # lock without --state-dir: a state dir of its own, removed at exit
        scratch = Path(tempfile.mkdtemp(prefix="grelmicro-lock-"))
    except OSError as err:
        return fail(
            f"lock: cannot create a state directory in {tempfile.gettempdir()} "
            f"({err.strerror}); mount a writable emptyDir and pass --state-dir",
            1,
        )
    try:
        settings = dataclasses.replace(settings, state_dir=scratch)
        return asyncio.run(_serve(settings, config, command))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _serve(settings: RunSettings, config: ApiConfig, command: LockSettings | None) -> int:
    log, namespace = Logger(settings.log_level), resolve_namespace(settings.namespace, config)
    # Requests are bounded by the retry period, so a slow answer is retried in time.
    timeout = max(2.0, settings.timing.retry_period * 2)
    store = LeaseStore(config, namespace, request_timeout=timeout)
    pod, label = settings.pod or "", (defaults.LEADER_LABEL, defaults.LEADER_LABEL_VALUE)
    this_pod = PodLabel(store.api, namespace, pod, *label)
    post_event, pod_deleting = api_poster(store.api, namespace), this_pod.deleting if pod else None
    sidecar: Sidecar | ShardedSidecar
    if settings.shards > 1:
        sidecar = wire_shards(
            settings, namespace, store, log, post_event=post_event, pod_deleting=pod_deleting
        )
    else:
        sidecar = wire(
            settings,
            namespace,
            store,
            log,
            post_event=post_event,
            put_label=this_pod.put if settings.label_pod else None,
            pod_deleting=pod_deleting,
            command=command,
        )
    try:
        await sidecar.elector.start()
    except StateDirError as err:
        log.error(str(err))
        return fail(str(err), 1)
    except OSError as err:
        message = f"cannot listen on port {settings.port}: {err.strerror}; pick another with --port"
        log.error(message)
        return fail(message, 1)
    _handle_signals(sidecar, log)
    server = sidecar.published.server
    age = process_age()  # how long the start took, and its CPU: a pod's start is contended
    log.info(
        "starting",
        started_in=round(age, 3) if age is not None else None,
        cpu_seconds=round(time.process_time(), 3),
        election=settings.election,
        lease=settings.lease,
        **({"shards": settings.shards} if settings.shards > 1 else {}),
        namespace=namespace,
        identity=settings.identity,
        source=config.source,
        **dataclasses.asdict(settings.timing),  # lease_duration, renew_deadline, retry_period
        port=server.bound_port if server is not None else 0,
    )
    code = await sidecar.elector.run()
    store.close()
    log.info("stopped")
    return sidecar.lock.exit_code(code) if sidecar.lock is not None else code


def _handle_signals(sidecar: Sidecar | ShardedSidecar, log: Logger) -> None:
    """SIGTERM/SIGINT: a graceful stop (``lock``: to the command while it runs); a second: out now."""
    received = 0

    def on_signal(sig: int) -> None:
        nonlocal received
        if sidecar.lock is not None:
            sidecar.lock.on_signal(sig)
            return
        received += 1
        if received > 1:
            log.warning("second signal: exiting at once", signal=signal.Signals(sig).name)
            sidecar.elector.resign_now()  # synchronous: never leave a "leader" file behind
            os._exit(1)
        log.info("shutting down", signal=signal.Signals(sig).name)
        sidecar.elector.stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    for held in take_held():
        on_signal(held)
