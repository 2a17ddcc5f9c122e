"""The settings toolkit of every command: where a value came from, and one-line errors naming it.

``run``, ``status`` and ``cleanup`` read ``--flag``, then ``GRELMICRO_SIDECAR_<FLAG>``;
the injector reads ``--flag``, then ``GRELMICRO_INJECTOR_<FLAG>`` (upper case,
``-`` → ``_``); the flag wins. A value that is wrong raises ``SettingsError``
with one line: where it came from (the flag or the env variable), the value,
and what is accepted. ``cli`` prints it and exits 2, with no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ..core import defaults
from ..core.durations import ACCEPTED_FORM, format_duration, parse_duration
from ..core.timing import Timing

SIDECAR_ENV = "GRELMICRO_SIDECAR_"
INJECTOR_ENV = "GRELMICRO_INJECTOR_"

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
NAMESPACE_FORM = (
    "a namespace name: lowercase letters, digits and '-', starting and ending with a letter "
    "or digit, at most 63 chars"
)
_QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class SettingsError(Exception):
    """A flag or env value is wrong; the message names it and the accepted form."""


class UsageError(SettingsError):
    """The command line itself is wrong (unknown flag, missing argument)."""


class Formatter(argparse.HelpFormatter):
    """argparse's help formatter, told the terminal width so it does not ``import shutil``.

    argparse builds a formatter for every ``add_argument``, and the default one
    imports ``shutil`` for the width, which loads zlib, bz2 and lzma: about
    0.5 MB of RSS in every sidecar for a help text nobody prints in a pod.
    """

    def __init__(self, prog: str, **kwargs: Any) -> None:
        if kwargs.get("width") is None:
            kwargs["width"] = _columns() - 2  # what the default formatter does
        super().__init__(prog, **kwargs)


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it: $COLUMNS, stdout, else 80."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "0")) > 0:
            return int(os.environ["COLUMNS"])
    stdout = sys.__stdout__
    try:
        return (os.get_terminal_size(stdout.fileno()).columns if stdout else 0) or 80
    except (ValueError, OSError):
        return 80


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, not usage + error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def env_name(prefix: str, flag: str) -> str:
    return prefix + flag.upper().replace("-", "_")


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

    def raw(self, flag: str) -> str | None:
        """The flag's value, else the env variable's (an empty one is returned as ``""``)."""
        value = self._flag(flag)
        if value is not None:
            return str(value)
        return self.environ.get(self.env_name(flag))

    def given(self, flag: str) -> bool:
        return self.raw(flag) is not None

    def where(self, flag: str) -> str:
        return f"--{flag}" if self._flag(flag) is not None else self.env_name(flag)

    def fail(self, flag: str, value: str, accepted: str) -> NoReturn:
        raise SettingsError(f"{self.where(flag)}={value!r} is not valid; expected {accepted}")

    # ---- kinds of value ------------------------------------------------------
    def duration(
        self, flag: str, default: float, *, zero_disables: bool = False, at_least: float = 0.0
    ) -> float:
        raw = self.raw(flag)
        if raw is None:
            return default
        if zero_disables and raw.strip() in ("0", "0s"):
            return 0.0
        disable = ", or 0 to disable" if zero_disables else ""
        try:
            value = parse_duration(raw)
        except ValueError:
            self.fail(flag, raw, ACCEPTED_FORM + disable)
        if value <= 0:
            self.fail(flag, raw, "a duration greater than 0, such as 15s" + disable)
        if value > defaults.MAX_DURATION:
            self.fail(flag, raw, f"a duration of at most {format_duration(defaults.MAX_DURATION)}")
        if value < at_least:
            self.fail(flag, raw, f"a duration of at least {format_duration(at_least)}" + disable)
        return value

    def port(self, flag: str, default: int, *, zero_disables: bool = False) -> int:
        raw = self.raw(flag)
        if raw is None:
            return default
        low = 0 if zero_disables else 1
        if not (raw.isascii() and raw.isdigit() and low <= int(raw) <= 65535):
            self.fail(
                flag,
                raw,
                "a port number from 1 to 65535"
                + (", or 0 to disable HTTP" if zero_disables else ""),
            )
        return int(raw)

    def choice(self, flag: str, default: str, choices: Sequence[str]) -> str:
        raw = self.raw(flag)
        if raw is None or raw == "":
            return default
        if raw not in choices:
            self.fail(flag, raw, "one of " + ", ".join(choices))
        return raw

    def log_level(self, default: str = "info") -> str:
        """An empty value counts as unset; case does not matter."""
        level = (self.raw("log-level") or default).lower()
        if level not in defaults.LOG_LEVELS:
            self.fail("log-level", level, "one of " + ", ".join(defaults.LOG_LEVELS))
        return level

    def quantity(self, flag: str, default: str) -> str:
        raw = self.raw(flag)
        if raw is None:
            return default
        if not _QUANTITY.fullmatch(raw):
            self.fail(flag, raw, "a Kubernetes quantity such as 10m, 0.5, 32Mi or 1Gi")
        return raw

    def boolean(self, flag: str, default: bool) -> bool:
        raw = self.raw(flag)
        if raw is None:
            return default
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        self.fail(flag, raw, "true or false")

    def namespace(self, flag: str = "namespace") -> str | None:
        raw = self.raw(flag) or None
        if raw is not None and not DNS_LABEL.fullmatch(raw):
            self.fail(flag, raw, NAMESPACE_FORM)
        return raw

    def timing(self) -> Timing:
        """The three durations, checked against every rule of contract §3."""
        timing = Timing(
            lease_duration=self.duration("lease-duration", defaults.LEASE_DURATION),
            renew_deadline=self.duration("renew-deadline", defaults.RENEW_DEADLINE),
            retry_period=self.duration("retry-period", defaults.RETRY_PERIOD),
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
