"""The settings toolkit of every command: each setting declared once, its flag, env and help.

A ``Setting`` is one row of a command's table: its flag, its env variable
(derived: ``GRELMICRO_SIDECAR_<FLAG>`` or ``GRELMICRO_INJECTOR_<FLAG>``, upper
case, ``-`` → ``_``), its default, its check (``checks``) and its help. From a
table, ``add_settings`` builds the argparse flags, each help ending with the
default, and ``Source.get`` reads a value: the flag, else the env variable,
else the default; the flag wins. A value that is wrong raises ``SettingsError``
with one line: where it came from (the flag or the env variable), the value,
and what is accepted. ``cli`` prints it and exits 2, with no traceback.

Guarantee: ``run`` never loads ``shutil`` through here (``Formatter``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from ..core import defaults
from ..core.defaults import LOG_LEVELS
from ..core.durations import format_duration
from ..core.timing import Timing
from . import checks
from .checks import Invalid

SIDECAR_ENV = "GRELMICRO_SIDECAR_"
INJECTOR_ENV = "GRELMICRO_INJECTOR_"

T = TypeVar("T")


class SettingsError(Exception):
    """A flag or env value is wrong; the message names it and the accepted form."""


class UsageError(SettingsError):
    """The command line itself is wrong (unknown flag, missing argument)."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting of a command. ``default``: when neither the flag nor the env variable is
    set (an empty value counts as unset, except for the checks in ``checks.BLANK_REFUSED``).
    ``shown``: the default as ``--help`` writes it, when the value alone would not say it
    ("" for nothing). ``required``: an example; the default is then never used. ``env``:
    False for a one-shot mode's flags. ``argparse``: more ``add_argument`` keywords."""

    flag: str
    check: Callable[[str], T]
    default: T
    help: str
    shown: str | None = None
    short: str | None = None
    required: str | None = None
    env: bool = True
    argparse: Mapping[str, Any] = field(default_factory=dict)

    def help_text(self) -> str:
        if self.required is not None:
            return f"{self.help} (required)"
        shown = _spelled(self.default) if self.shown is None else self.shown
        return f"{self.help} (default: {shown})" if shown else self.help


#: A command's settings, in the order ``--help`` lists them.
Table = tuple[Setting[Any], ...]


def _spelled(value: object) -> str:
    """A default as a user would write it: ``15s``, ``false``, ``4040``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format_duration(value)
    return str(value)


def switch(flag: str, help: str, short: str | None = None) -> Setting[bool]:
    """A flag without a value (``-A``, ``--watch``): on when given."""
    extra = {"action": "store_true"}
    return Setting(flag, checks.boolean, False, help, "", short, env=False, argparse=extra)


# ---- settings several commands share: flag, check, default, help ----------------------------
# fmt: off
NAMESPACE: Setting[str | None] = Setting(
    "namespace", checks.namespace, None, "namespace of the Leases", short="-n",
    shown="the service account's, then $POD_NAMESPACE, then the kubeconfig context's")
KUBECONFIG: Setting[str | None] = Setting(
    "kubeconfig", str, None, "kubeconfig file", "$KUBECONFIG, then ~/.kube/config, then the pod's service account")
LOG_LEVEL = Setting(
    "log-level", checks.log_level, "info", "least severe level logged: " + ", ".join(LOG_LEVELS))
LEASE_DURATION = Setting(
    "lease-duration", checks.duration, defaults.LEASE_DURATION,
    "how long followers wait, after the last renewal, before taking over: longer is a slower "
    "failover after a crash, shorter is more sensitive to API server hiccups")
RENEW_DEADLINE = Setting(
    "renew-deadline", checks.duration, defaults.RENEW_DEADLINE,
    "the leader steps down if it has not renewed within this; less than --lease-duration")
RETRY_PERIOD = Setting(
    "retry-period", checks.duration, defaults.RETRY_PERIOD,
    "interval of acquire and renew attempts; shorter is more API server load in an outage")
MARGIN = Setting(
    "margin", checks.sweep_margin, defaults.SWEEP_MARGIN,
    f"how long past expiry a Lease must be to be deleted; at least {defaults.MIN_SWEEP_MARGIN:g}s,"
    " for the sweeper's own pauses")
# fmt: on
TIMING: Table = (LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
CONNECTION: Table = (NAMESPACE, KUBECONFIG, LOG_LEVEL)


class Formatter(argparse.HelpFormatter):
    """argparse's help formatter, told the terminal's width so that it does not import
    ``shutil`` (with zlib, bz2 and lzma): argparse builds one for every ``add_argument``,
    and ``run`` would carry them in every pod for a help text nobody prints there."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        kwargs["width"] = kwargs.get("width") or _columns() - 2  # as the default formatter does
        super().__init__(prog, **kwargs)


def _columns() -> int:
    """$COLUMNS, else the terminal's width, else 80, as ``shutil.get_terminal_size`` finds it."""
    with contextlib.suppress(ValueError, OSError):
        return int(os.environ.get("COLUMNS") or 0) or os.get_terminal_size().columns or 80
    return 80


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, not usage + error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def add_settings(parser: argparse.ArgumentParser, table: Iterable[Setting[Any]]) -> None:
    """The flags of a table, unset by default (so ``Source`` can tell the env variable's turn)."""
    for s in table:
        names = [s.short, f"--{s.flag}"] if s.short else [f"--{s.flag}"]
        parser.add_argument(*names, help=s.help_text(), default=None, **s.argparse)


def env_name(prefix: str, flag: str) -> str:
    return prefix + flag.upper().replace("-", "_")


def env_note(prefix: str) -> str:
    """What ``--help`` says of the env variables."""
    return (
        f"Each flag can also be set by env {prefix}<FLAG> (upper case, '-' -> '_'); the flag wins."
    )


class Source:
    """The parsed flags of one command, backed by its env variables."""

    def __init__(
        self, args: Any, env_prefix: str, environ: Mapping[str, str] | None = None
    ) -> None:
        self.args = args
        self.prefix = env_prefix
        self.environ = os.environ if environ is None else environ

    def env_name(self, flag: str) -> str:
        return env_name(self.prefix, flag)

    def _flag(self, flag: str) -> Any:
        return getattr(self.args, flag.replace("-", "_"), None)

    def raw(self, flag: str, env: bool = True) -> str | None:
        """The flag's value, else the env variable's (an empty one is returned as ``""``)."""
        value = self._flag(flag)
        if value is not None:
            return str(value)
        return self.environ.get(self.env_name(flag)) if env else None

    def given(self, flag: str) -> bool:
        return self.raw(flag) is not None

    def where(self, flag: str) -> str:
        return f"--{flag}" if self._flag(flag) is not None else self.env_name(flag)

    def fail(self, flag: str, value: str, accepted: str) -> NoReturn:
        raise SettingsError(f"{self.where(flag)}={value!r} is not valid; expected {accepted}")

    def get(self, setting: Setting[T]) -> T:
        """The setting's value, checked; its default when unset."""
        raw = self.raw(setting.flag, setting.env)
        if raw is None or (raw == "" and setting.check not in checks.BLANK_REFUSED):
            if setting.required is not None:
                flag = setting.flag
                raise SettingsError(
                    f"--{flag} is required (or {self.env_name(flag)}): {setting.help}, "
                    f"e.g. --{flag}={setting.required}"
                )
            return setting.default
        try:
            return setting.check(raw)
        except Invalid as err:
            if err.reason:
                raise SettingsError(f"{self.where(setting.flag)}{err.reason}") from None
            self.fail(setting.flag, raw, err.accepted)

    def namespace(self) -> str | None:
        return self.get(NAMESPACE)

    def timing(self) -> Timing:
        """The three durations, checked against every rule of contract §3."""
        timing = Timing(
            lease_duration=self.get(LEASE_DURATION),
            renew_deadline=self.get(RENEW_DEADLINE),
            retry_period=self.get(RETRY_PERIOD),
        )
        problems = timing.problems(self.describe)
        if problems:
            raise SettingsError(problems[0])
        return timing

    def describe(self, setting: str, seconds: float) -> str:
        """A timing value as the user gave it, or as the default it is."""
        if self.given(setting):
            return f"{self.where(setting)}={format_duration(seconds)}"
        return f"{setting} {format_duration(seconds)} (the default)"
