"""The agent's timing rules and the token threshold, set from flags, a file or code.

SPEC §6.3 and §6.6 fix the reference agent's values: the incremental
trigger writes after an hour of idleness (``idle_after``), a session is idle
after 30 minutes (``session_idle``), the watchdog polls every 300 s
(``watchdog_poll``), and a batch is 16,000 tokens (``threshold``, one of
8,000 / 16,000 / 32,000). Nobody can try the runtime in a short test with
those, so each is configurable in three places, the later winning:

1. the defaults (:class:`~memory.runtime._runtime.RuntimeConfig`, the embedded config);
2. ``<state>/scriptorium.toml``: top-level keys ``threshold``, ``idle_after``,
   ``session_idle``, ``watchdog_poll`` (seconds), and the ``[consolidation]``
   table (:class:`~memory.consolidation.ConsolidationPolicy`); read by the command line,
   and by :func:`~memory.open_runtime` when it is given no config;
3. the command line's flags.

The writer is chosen the same way (:func:`writer_kind`, :func:`model_writer_for`):
``--writer``, else ``$SCRIPTORIUM_WRITER``, else ``kind`` in the ``[writer]`` table,
else the built-in extractive writer; a model writer's settings layer the
``[writer]`` table, ``$SCRIPTORIUM_MODEL_*`` and the flags
(:mod:`memory.writers.model`).

A threshold the reference agent would not accept is allowed, with a
:class:`~memory.ledger._ledger.ReferenceThresholdWarning`: the markers stay compatible, but that
agent, run on the same state, batches differently.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from memory._errors import SettingsError
from memory.consolidation import ConsolidationPolicy
from memory.writers import EventListener
from memory.writers.model import ModelWriter, UsageFile, model_settings

__all__ = [
    "MODEL_FLAGS",
    "SETTINGS_FILE",
    "SettingsError",
    "Timings",
    "check_lock_timeout",
    "check_model_flags",
    "check_seconds",
    "check_threshold",
    "model_writer_for",
    "parse_settings",
    "read_settings",
    "read_writer_table",
    "writer_kind",
]

WRITER_KINDS = ("extractive", "model")

SETTINGS_FILE = "scriptorium.toml"


def check_threshold(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(where, f"the token threshold must be a positive integer, not {value!r}")
    return value


def check_seconds(value: object, where: str, name: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise SettingsError(where, f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Timings:
    """The four values; ``None``: not set here, the earlier source's value stands."""

    threshold: int | None = None
    idle_after: float | None = None  # the incremental trigger's idle time
    session_idle: float | None = None  # a session is idle (the boundary) after this
    watchdog_poll: float | None = None  # between the idle watchdog's disk polls
    # [consolidation]: when the runtime consolidates by itself (issue 23)
    consolidation: ConsolidationPolicy | None = None

    def over(self, base: Timings) -> Timings:
        """These values where set, ``base``'s elsewhere."""
        return Timings(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None
                          else getattr(base, f.name) for f in fields(self)})


def parse_settings(data: bytes, where: str) -> Timings:
    """Pure: the timings in a ``scriptorium.toml``'s bytes; ``where`` names it in errors."""
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(where, f"not valid TOML ({exc}); fix or remove the file") from None
    known = {f.name for f in fields(Timings)}
    # [writer]: read_writer_table; [consolidation]: below
    unknown = sorted(set(document) - known - {"writer"})
    if unknown:
        raise SettingsError(where, f"unknown key(s) {', '.join(unknown)}; the keys are "
                                   f"{', '.join(sorted(known))}")
    threshold = document.get("threshold")
    return Timings(
        threshold=None if threshold is None else check_threshold(threshold, where),
        **{name: None if document.get(name) is None
           else check_seconds(document[name], where, name)
           for name in ("idle_after", "session_idle", "watchdog_poll")},
        consolidation=_consolidation(document.get("consolidation"), where),
    )


def _consolidation(table: object, where: str) -> ConsolidationPolicy | None:
    """``[consolidation]``: ``local_batches``, ``local_tokens`` (positive integers),
    ``global_interval``, ``check_interval`` (seconds), ``enabled``, ``model`` (true/false)."""
    if table is None:
        return None
    where = f"{where} [consolidation]"
    if not isinstance(table, dict):
        raise SettingsError(where, "consolidation must be a table ([consolidation])")
    policy = ConsolidationPolicy()
    unknown = sorted(set(table) - {f.name for f in fields(policy)})
    if unknown:
        raise SettingsError(where, f"unknown key(s) {', '.join(unknown)}; the keys are "
                                   f"{', '.join(f.name for f in fields(policy))}")
    values: dict[str, Any] = {}
    for name in ("local_batches", "local_tokens"):
        if name in table:
            value = table[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingsError(where, f"{name} must be a positive integer, not {value!r}")
            values[name] = value
    for name in ("global_interval", "check_interval"):
        if name in table:
            values[name] = check_seconds(table[name], where, name)
    for name in ("enabled", "model"):
        if name in table:
            if not isinstance(table[name], bool):
                raise SettingsError(where, f"{name} must be true or false, not {table[name]!r}")
            values[name] = table[name]
    return replace(policy, **values)


def read_settings(state_dir: str | os.PathLike[str]) -> Timings:
    """``<state>/scriptorium.toml``'s timings; a missing file sets nothing."""
    path = os.path.join(os.fspath(state_dir), SETTINGS_FILE)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return Timings()
    return parse_settings(data, path)


def read_writer_table(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``[writer]`` table of ``<state>/scriptorium.toml`` (empty without one)."""
    path = os.path.join(os.fspath(state_dir), SETTINGS_FILE)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    parse_settings(data, path)  # the same errors as for the timings
    table = tomllib.loads(data.decode("utf-8")).get("writer", {})
    if not isinstance(table, dict):
        raise SettingsError(path, "writer must be a table ([writer])")
    return table


def writer_kind(state_dir: str | os.PathLike[str], flag: str | None,
                env: Mapping[str, str] | None = None) -> str:
    """``extractive`` or ``model``: the flag, else ``$SCRIPTORIUM_WRITER``, else ``[writer] kind``."""
    source = os.environ if env is None else env
    kind = flag or source.get("SCRIPTORIUM_WRITER") or read_writer_table(state_dir).get("kind")
    kind = kind or "extractive"
    if kind not in WRITER_KINDS:
        raise SettingsError("--writer", f"the writer is one of {', '.join(WRITER_KINDS)}, "
                                        f"not {kind!r}")
    return str(kind)


MODEL_FLAGS = ("base_url", "model", "provider")  # the command line's model writer options


def check_model_flags(kind: str, flags: Mapping[str, Any]) -> None:
    """A model writer's option given while another writer is chosen: :class:`SettingsError`.

    ``--base-url`` without ``--writer model`` (and no ``kind = "model"``
    elsewhere) did nothing, silently; the user believed a model wrote.
    """
    given = [f"--{name.replace('_', '-')}" for name in MODEL_FLAGS if flags.get(name) is not None]
    if kind != "model" and given:
        named = " and ".join(given)
        raise SettingsError(given[0], f"{named} {'is an option' if len(given) == 1 else 'are options'}"
                                      f" of the model writer, and the writer here is {kind}; "
                                      f"add --writer model, or drop {named}")


def model_writer_for(
    state_dir: str | os.PathLike[str], flags: Mapping[str, Any], *,
    env: Mapping[str, str] | None = None,
    on_event: EventListener | None = None,
) -> ModelWriter:
    """A :class:`ModelWriter` from ``[writer]``, the environment and ``flags`` (the later wins)."""
    source = os.environ if env is None else env
    path = os.path.join(os.fspath(state_dir), SETTINGS_FILE)
    settings = model_settings(read_writer_table(state_dir), source, flags,
                              where=f"{path} [writer]")
    return ModelWriter(settings, env=source, on_event=on_event,
                       usage_file=UsageFile(os.path.join(os.fspath(state_dir), "memory")))


def check_lock_timeout(value: object, where: str) -> float | None:
    """A lock wait bound: None (forever) or a finite number of seconds >= 0.

    NaN compares false with everything, so a poll bounded by it never ends;
    infinity is "forever" spelled so that nobody meant it. Both are refused.
    """
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise SettingsError(
            where, f"lock_timeout must be a finite number of seconds >= 0, not {value!r}")
    return float(value)
