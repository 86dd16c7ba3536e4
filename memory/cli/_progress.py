"""Progress of the long commands, drawn on stderr while they run.

A ``simulate --faults all`` spends a minute in its boundary rounds, and a
``memory write`` against a failing model half a minute in retries, with
nothing on the screen: a user cannot tell work from a hang. So the long
commands draw what is being done, how far, the rate, and a model writer's
retries and waits, with rich (the choice and why: the cli section of the
decisions notes).

Only the CLI draws. The layers below report through what they already
have: ``progress(done, total)`` callbacks (simulate, migrate, backfill,
import, reindex) and the structured events of ``RuntimeConfig.on_event``
and ``ModelWriter(on_event=...)``; :meth:`ProgressView.on_event` reads them,
so no lower layer imports a drawing library.

Off (a no-op) with ``--quiet`` or when stderr is not a terminal: a pipe or
a log file gets no redraws. stdout is never touched, so ``--json`` stays
one document. What the rows look like (rich's columns) is
``_progress_rows``, imported only to draw; this module reads the events.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Self, TypeVar

import click

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["QUIET_OPTION", "ProgressView", "is_terminal"]

F = TypeVar("F", bound=Callable[..., Any])

QUIET_OPTION: Callable[[F], F] = click.option(
    "--quiet", "-q", is_flag=True,
    help="Draw no progress on stderr (it is drawn only on a terminal anyway).")


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal; tests replace this to draw into a buffer."""
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False


class ProgressView:
    """One live display on stderr for one command; every method is a no-op when off.

    Rows: one per stage (``stage``), fed by ``view(done, total)``; under
    them a row of memory writes (batches finished, in flight, failed,
    quarantined) and a row for the model writer (calls, retries, seconds
    waited, the current wait), each opened by the first event for it.
    """

    def __init__(self, what: str, unit: str = "", *, counted: bool = True, quiet: bool = False,
                 stream: IO[str] | None = None) -> None:
        stream = sys.stderr if stream is None else stream  # click's runner swaps sys.stderr
        self.enabled = not quiet and is_terminal(stream)
        self._first = (what, unit, counted)
        self._stage: TaskID | None = None
        self._batches: TaskID | None = None
        self._model: TaskID | None = None
        self._jobs: dict[str, int] = {"written": 0, "failed": 0, "quarantined": 0}
        self._in_flight: set[object] = set()  # job ids submitted and not finished
        self._calls = self._retries = 0
        self._waited = 0.0  # seconds the model writer's retries waited, in all
        self._last_error = ""
        self._progress: Progress | None = None
        if self.enabled:
            from memory.cli._progress_rows import open_rows  # rich: only to draw

            self._progress = open_rows(stream)

    def __enter__(self) -> Self:
        if self._progress is not None:
            self._progress.start()
            what, unit, counted = self._first
            self.stage(what, unit, counted=counted)
        return self

    def __exit__(self, failed: type[BaseException] | None, *exc: object) -> None:
        if self._progress is None:
            return
        if failed is None:  # a row whose total was never known was all there was: done
            for task in self._progress.tasks:
                if task.total is None:
                    self._progress.update(task.id, total=task.completed)
        self._progress.stop()

    # -- stages and counts ---------------------------------------------------------

    def stage(self, what: str, unit: str = "", total: int | None = None, *,
              counted: bool = True) -> None:
        """A new row for the next stage; the last one stays above it.

        ``counted=False``: a row that only says what is being done (its counts
        are on the rows of memory writes and of the model).
        """
        if self._progress is None:
            return
        if self._stage is not None:
            last = self._progress.tasks[self._stage]
            if last.total is None:  # done: its count was all there was
                self._progress.update(self._stage, total=last.completed)
            elif not last.finished:  # e.g. the simulated runtime crashed: it starts again
                self._progress.update(self._stage, cut=True, note="cut short")
            self._progress.stop_task(self._stage)
        # Jobs of a runtime that is gone never finish: only the new stage's are counted.
        self._in_flight.clear()
        self._update_jobs(None)
        self._stage = self._progress.add_task(what, total=total, unit=unit, note="",
                                              bar=counted, cut=False)

    def __call__(self, done: int, total: int | None) -> None:
        """``progress(done, total)``, the callback the lower layers take."""
        if self._progress is not None and self._stage is not None:
            self._progress.update(self._stage, completed=done, total=total)

    # -- the runtime's and the model writer's events --------------------------------

    def on_event(self, event: Mapping[str, Any]) -> None:
        """Read one runtime or model-writer event (``RuntimeConfig.on_event``)."""
        if self._progress is None:
            return
        name = event.get("event")
        if name == "stage":  # the simulator's own: the next stage of its run
            unit = str(event.get("unit", ""))
            self.stage(str(event["what"]), unit, event.get("total"), counted=bool(unit))
        elif name in ("submitted", "job", "abandoned", "deferred", "quarantined"):
            self._on_job(str(name), event)
        elif isinstance(name, str) and name.startswith("model_"):
            self._on_model(name, event)

    def _on_job(self, name: str, event: Mapping[str, Any]) -> None:
        assert self._progress is not None
        if self._batches is None:
            self._batches = self._progress.add_task("memory writes", total=None,
                                                    unit="batches", note="", tally=True)
        note = None
        if name == "submitted":
            self._in_flight.add(event.get("job"))
        elif name in ("job", "abandoned"):
            self._in_flight.discard(event.get("job"))
            if name == "job":
                self._jobs["written" if event.get("result") == "written" else "failed"] += 1
        elif name == "quarantined":
            self._jobs["quarantined"] += 1
        elif name == "deferred":
            note = f"a failed batch is retried in {_seconds(event.get('seconds'))}"
        self._update_jobs(note)

    def _update_jobs(self, note: str | None) -> None:
        """Batches finished; in flight and failures in the note.

        No total: how many batches a run makes is known only at its end (the
        bar pulses; a total that grew would show done while more come).
        """
        if self._progress is None or self._batches is None:
            return
        jobs = self._jobs
        counts = ", ".join([f"{len(self._in_flight)} in flight"] * bool(self._in_flight) + [
            f"{n} {k}" for k, n in jobs.items() if n and k in ("failed", "quarantined")])
        self._progress.update(self._batches, completed=jobs["written"] + jobs["failed"],
                              note=counts if note is None else "; ".join(
                                  part for part in (note, counts) if part))

    def _on_model(self, name: str, event: Mapping[str, Any]) -> None:
        assert self._progress is not None
        if self._model is None:
            self._model = self._progress.add_task(
                f"model {event.get('model', '')}".rstrip(), total=None, unit="", note="",
                bar=False, tally=True)
        now = ""  # what it waits for now; the counts stay after it
        if name == "model_retry":
            self._retries += 1
            seconds = event.get("seconds")
            self._waited += seconds if isinstance(seconds, int | float) else 0.0
            self._last_error = _short(event.get("error"))
            now = (f"waiting {_seconds(seconds)} before attempt "
                   f"{int(event.get('attempt', 0)) + 1} of {event.get('attempts', '?')}; ")
        elif name == "model_usage":  # a batch's end (its failure is on the writes' row)
            self._calls += int(event.get("calls") or 0)
        elif name == "model_budget_wait":
            now = f"daily token budget spent: waiting {_seconds(event.get('seconds'))}; "
        elif name == "model_mode":
            now = f"the endpoint refused a form, now {event.get('mode')}; "
        note = f"{self._calls} call{'s' * (self._calls != 1)}, " + (
            "1 retry" if self._retries == 1 else f"{self._retries} retries")
        if self._retries:
            note += f" ({_seconds(self._waited)} waited, last {self._last_error})"
        # Drawn now, not at the next tick: a wait is what the user must see at once.
        self._progress.update(self._model, note=now + note, refresh=True)


def _seconds(value: object) -> str:
    if not isinstance(value, int | float):
        return "a while"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    return f"{value:.1f} s"


def _short(error: object) -> str:
    """``HTTP 503`` of ``HTTP 503: {body...}``: the body is for the log, not the screen."""
    text = str(error or "no detail")
    return text.partition(":")[0][:60]
