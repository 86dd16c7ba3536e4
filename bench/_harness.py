"""What every benchmark of the project shares: rounds, summaries, rows, one table.

A single timing on a shared 2-core machine says little, and a floor measured
once, cold, or by other code than the figure it is set against says less.
So every benchmark file times through this module:

- **rounds**: a measurement runs ``warmup`` times untimed, then ``rounds``
  times (at least :data:`MIN_ROUNDS`); what is reported is the median, with
  the min and max, of those rounds (:class:`Summary`);
- **interleaved**: a figure and its floor are measured in the same round,
  one after the other, their order swapped every round, so a burst of load
  from another process hits both alike;
- **one percentile function** (:func:`percentile`) for latencies;
- **rows** (:class:`Row`): a figure, what it is set against and what that is
  (a *floor*: the cheapest correct way to do the same work; or, named as
  such, a ceiling, a scaling baseline, the same run's CPU time, a baseline to
  beat), the ratio, the target and whether it is met. Each benchmark prints
  its rows as JSON (``--json``) and ``bench/run.py`` renders every table
  with :func:`markdown_table`, so all tables read alike.

Plain synchronous code except :func:`arounds`/:func:`ainterleaved`, which do
the same for measurements that must run inside an event loop.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_ROUNDS = 5

# What the cell a figure is set against is; anything but FLOOR is not a floor.
FLOOR = "floor"
CEILING = "ceiling"
SCALING = "scaling baseline"
CPU_TIME = "CPU time, same run"
TO_BEAT = "baseline to beat"
RIDES_ON = "work it follows"  # a cost that rides on another operation, same rounds
KINDS = (FLOOR, CEILING, SCALING, CPU_TIME, TO_BEAT, RIDES_ON)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``samples``, interpolated between closest ranks.

    The one percentile of the benchmarks: p50 of an even count is the mean
    of the two middle samples, p100 the largest, p0 the smallest.
    """
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0-100, got {q}")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


@dataclass(frozen=True)
class Summary:
    """The median, min and max of the rounds of one measurement (``rounds`` = 1: one run).

    ``values`` keeps each round's figure in round order, so two measurements
    taken in the same rounds can be compared round by round (:attr:`Row.ratio`).
    """

    median: float
    low: float
    high: float
    rounds: int
    values: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("a summary of no rounds")
        return cls(statistics.median(values), min(values), max(values), len(values),
                   tuple(values))

    @classmethod
    def single(cls, value: float) -> Summary:
        """One figure of one run (a simulate run, a count): shown without a range."""
        return cls(value, value, value, 1, (value,))

    def scaled(self, factor: float) -> Summary:
        """The same rounds in another unit (``factor`` > 0), e.g. seconds to ms."""
        return Summary(self.median * factor, self.low * factor, self.high * factor, self.rounds,
                       tuple(value * factor for value in self.values))

    def inverse(self, numerator: float = 1.0) -> Summary:
        """``numerator / x`` of every round: seconds per item to items per second."""
        return Summary(numerator / self.median, numerator / self.high, numerator / self.low,
                       self.rounds, tuple(numerator / value for value in self.values))

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "rounds": self.rounds,
                "values": list(self.values)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        return cls(float(data["median"]), float(data["min"]), float(data["max"]),
                   int(data["rounds"]), tuple(float(v) for v in data.get("values", ())))


def paired_ratio(value: Summary, against: Summary) -> float | None:
    """The median of the round-by-round ratios, if both were measured in the same rounds.

    A burst of load from another process lasts longer than a round, so it
    lands on both sides of one round: the per-round ratio cancels it where
    the ratio of the two medians (which may come from different rounds) does
    not. None if the rounds do not pair up (different counts, a zero).
    """
    if len(value.values) != len(against.values) or len(value.values) < 2:
        return None
    if not all(value.values) or not all(against.values):
        return None
    return statistics.median(v / a for v, a in zip(value.values, against.values))


def _check_rounds(rounds: int, warmup: int) -> None:
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be >= 1 and warmup >= 0, got {rounds} and {warmup}")


def rounds(measure: Callable[[], float], *, rounds: int = MIN_ROUNDS,
           warmup: int = 1) -> Summary:
    """Run ``measure`` ``warmup`` times (discarded), then ``rounds`` times; summarise its values.

    ``measure`` returns one figure per round (seconds of a timed call, a p50
    of the round's samples, a rate...).
    """
    return interleaved({"only": measure}, rounds=rounds, warmup=warmup)["only"]


def round_order(names: Sequence[str], number: int) -> list[str]:
    """The order of round ``number``: rotated by one each round, reversed every other.

    So each measurement takes each position, and follows each of the
    others, as often as the rounds allow: what one leaves behind (dirty
    pages, a warm cache) does not always land on the same other.
    """
    shift = number % len(names) if names else 0
    order = list(names[shift:]) + list(names[:shift])
    return order if (number // len(names) if names else 0) % 2 == 0 else order[::-1]


def interleaved(measures: Mapping[str, Callable[[], float]], *, rounds: int = MIN_ROUNDS,
                warmup: int = 1, settle: Callable[[], object] | None = None
                ) -> dict[str, Summary]:
    """Each measurement once per round, in the order of :func:`round_order`.

    Warm-up rounds run every measurement too, so none of them is the cold,
    first one in the timed rounds. ``settle`` runs, untimed, before each
    measurement (e.g. ``os.sync`` so that none pays for another's writeback).
    """
    _check_rounds(rounds, warmup)
    names = list(measures)
    values: dict[str, list[float]] = {name: [] for name in names}
    for number in range(warmup + rounds):
        for name in round_order(names, number):
            if settle is not None:
                settle()
            value = measures[name]()
            if number >= warmup:
                values[name].append(value)
    return {name: Summary.of(found) for name, found in values.items()}


async def arounds(measure: Callable[[], Awaitable[float]], *, rounds: int = MIN_ROUNDS,
                  warmup: int = 1) -> Summary:
    """:func:`rounds` for a measurement that runs inside the event loop."""
    return (await ainterleaved({"only": measure}, rounds=rounds, warmup=warmup))["only"]


async def ainterleaved(measures: Mapping[str, Callable[[], Awaitable[float]]], *,
                       rounds: int = MIN_ROUNDS, warmup: int = 1) -> dict[str, Summary]:
    """:func:`interleaved` for measurements that run inside the event loop."""
    _check_rounds(rounds, warmup)
    names = list(measures)
    values: dict[str, list[float]] = {name: [] for name in names}
    for number in range(warmup + rounds):
        for name in round_order(names, number):
            value = await measures[name]()
            if number >= warmup:
                values[name].append(value)
    return {name: Summary.of(found) for name, found in values.items()}


def timed(fn: Callable[[], object], *, setup: Callable[[], object] | None = None,
          loops: int = 1) -> Callable[[], float]:
    """A measurement: seconds per call of ``fn``, averaged over ``loops`` calls.

    ``setup`` runs before the timed calls, untimed; the cyclic GC is
    collected before timing and left on during it.
    """
    if loops < 1:
        raise ValueError(f"loops must be >= 1, got {loops}")

    def measure() -> float:
        if setup is not None:
            setup()
        gc.collect()
        began = time.perf_counter()
        for _ in range(loops):
            fn()
        return (time.perf_counter() - began) / loops

    return measure


def cpu_timed(fn: Callable[[], object]) -> tuple[Callable[[], float], Callable[[], float]]:
    """Two measurements of the same calls: wall seconds, and the CPU seconds of those calls.

    Call the first (it runs ``fn``), then the second (it returns the CPU
    time of that call): the CPU time is the same run's, never a floor.
    """
    last: list[float] = [0.0]

    def wall() -> float:
        gc.collect()
        began, cpu = time.perf_counter(), time.process_time()
        fn()
        last[0] = time.process_time() - cpu
        return time.perf_counter() - began

    def cpu() -> float:
        return last[0]

    return wall, cpu


# -- rows and the one table ---------------------------------------------------------


def check(value: float, op: str, bound: float) -> bool:
    """Whether ``value op bound`` holds, ``op`` one of <=, <, >=, >, ==."""
    if op == "<=":
        return value <= bound
    if op == "<":
        return value < bound
    if op == ">=":
        return value >= bound
    if op == ">":
        return value > bound
    if op == "==":
        return value == bound
    raise ValueError(f"unknown comparison {op!r}")


@dataclass(frozen=True)
class Row:
    """One figure of a table.

    ``against`` is what the figure is set against and ``kind`` what that is
    (one of :data:`KINDS`); ``ratio`` is ``value / against`` of the medians
    unless ``faster`` says the row reads ``against / value`` ("x faster").
    ``met`` is None when the row has no target.
    """

    figure: str
    value: Summary
    unit: str
    against: Summary | None = None
    kind: str = ""
    what: str = ""
    faster: bool = False
    target: str = ""
    met: bool | None = None
    text: str = ""  # a figure that is not a number (a verdict, a count list)
    paired: bool = True  # False: the two sides were not measured in the same rounds

    def __post_init__(self) -> None:
        if self.against is not None and self.kind not in KINDS:
            raise ValueError(f"row {self.figure!r}: unknown comparison kind {self.kind!r}")
        if self.target and self.met is None:
            raise ValueError(f"row {self.figure!r} has a target but no verdict")

    @property
    def ratio(self) -> float | None:
        """Per round when the rounds pair up (see :func:`paired_ratio`), else of the medians."""
        if self.against is None or not self.against.median or not self.value.median:
            return None
        paired = paired_ratio(self.value, self.against) if self.paired else None
        if paired is not None:
            return 1 / paired if self.faster else paired
        if self.faster:
            return self.against.median / self.value.median
        return self.value.median / self.against.median

    def to_json(self) -> dict[str, Any]:
        return {
            "figure": self.figure, "value": self.value.to_json(), "unit": self.unit,
            "against": None if self.against is None else self.against.to_json(),
            "kind": self.kind, "what": self.what, "faster": self.faster, "ratio": self.ratio,
            "target": self.target, "met": self.met, "text": self.text, "paired": self.paired,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Row:
        against = data.get("against")
        return cls(
            figure=str(data["figure"]), value=Summary.from_json(data["value"]),
            unit=str(data.get("unit", "")),
            against=None if against is None else Summary.from_json(against),
            kind=str(data.get("kind", "")), what=str(data.get("what", "")),
            faster=bool(data.get("faster", False)), target=str(data.get("target", "")),
            met=data.get("met"), text=str(data.get("text", "")),
            paired=bool(data.get("paired", True)),
        )


def ratio_row(figure: str, value: Summary, unit: str, against: Summary, *, kind: str,
              what: str, op: str = "", bound: float = 0.0, faster: bool = False,
              paired: bool = True) -> Row:
    """A row whose target (if ``op``) bounds its ratio: e.g. ``<= 1.3`` times the floor.

    ``paired=False`` when ``against`` was not measured in the same rounds.
    """
    row = Row(figure, value, unit, against, kind, what, faster, paired=paired)
    if not op:
        return row
    ratio = row.ratio
    met = ratio is not None and check(ratio, op, bound)
    word = "x faster" if faster else f"x the {kind}"
    return Row(figure, value, unit, against, kind, what, faster, f"{op} {bound:g}{word}", met,
               paired=paired)


def value_row(figure: str, value: Summary, unit: str, *, op: str = "", bound: float = 0.0,
              against: Summary | None = None, kind: str = "", what: str = "") -> Row:
    """A row whose target (if ``op``) bounds the figure itself, e.g. ``>= 100,000 msg/s``."""
    if not op:
        return Row(figure, value, unit, against, kind, what)
    met = check(value.median, op, bound)
    return Row(figure, value, unit, against, kind, what, False,
               f"{op} {bound:,g} {unit}".rstrip(), met)


def format_number(value: float) -> str:
    """Four significant digits, thousands separated; no exponent for the sizes met here."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"  # a count, or a figure past the four digits shown
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, 3 - magnitude)
    return f"{value:,.{decimals}f}"


def format_summary(summary: Summary, unit: str) -> str:
    """``median unit (min-max, N rounds)``, or the bare value of a single run."""
    suffix = f" {unit}" if unit else ""
    if summary.rounds == 1:
        return f"{format_number(summary.median)}{suffix}"
    return (f"{format_number(summary.median)}{suffix} "
            f"({format_number(summary.low)}-{format_number(summary.high)}, "
            f"{summary.rounds} rounds)")


def format_ratio(row: Row) -> str:
    """``1.76x``; ``0.034x`` below 0.1; for a "faster" row ``5.2x faster`` or ``1.02x slower``."""
    ratio = row.ratio
    if ratio is None:
        return ""
    if row.faster:
        return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
    return f"{ratio:.3f}x" if ratio < 0.1 else f"{ratio:.2f}x"


def markdown_table(rows: Sequence[Row]) -> str:
    """The one table every benchmark is shown in."""
    lines = [
        ("| figure | measured: median (min-max) | set against (what it is) | ratio | target "
         "| met |"),
        "|---|---:|---|---:|---|---|",
    ]
    for row in rows:
        measured = row.text or format_summary(row.value, row.unit)
        against = ""
        if row.against is not None:
            against = f"{row.kind}: {format_summary(row.against, row.unit)}"
            if row.what:
                against += f"; {row.what}"
        elif row.what:
            against = row.what
        shown = format_ratio(row)
        met = "" if row.met is None else ("met" if row.met else "**MISSED**")
        lines.append(f"| {row.figure} | {measured} | {against} | {shown} | {row.target} "
                     f"| {met} |")
    return "\n".join(lines)


def missed(rows: Sequence[Row]) -> list[Row]:
    """The rows whose target is not met."""
    return [row for row in rows if row.met is False]
