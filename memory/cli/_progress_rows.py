"""The rows the long commands draw, with rich: imported only when something is drawn.

See :mod:`memory.cli._progress`, which feeds them. One row per task: a
spinner (✓ done, ``-`` cut short), what, a bar, ``done/total unit``, the
rate, the time taken, and a note that is cut first on a narrow terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column
from rich.text import Text

__all__ = ["open_rows"]


def open_rows(stream: IO[str]) -> Progress:
    """A display on ``stream``, drawn as on a terminal (the caller checked it is one)."""
    return _Rows(
        _Spinner(finished_text="[green]✓"),
        TextColumn("{task.description}", table_column=Column(no_wrap=True)),
        _Bar(bar_width=16),
        _Count(table_column=Column(no_wrap=True)),
        _Rate(table_column=Column(no_wrap=True)),
        TimeElapsedColumn(),
        # On a narrow terminal the note is cut, not the counts (it says the most
        # urgent first: what is awaited now).
        TextColumn("{task.fields[note]}",
                   table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
        console=Console(file=stream, force_terminal=True),
        refresh_per_second=4,
        expand=True,  # the note's column (ratio 1) takes what the others leave
        redirect_stdout=False,  # stdout is the command's output (--json)
    )


class _Count(ProgressColumn):
    """``12/60 turns``, or ``12 turns`` while the total is unknown."""

    def render(self, task: Task) -> Text:
        if not task.fields.get("bar", True):
            return Text("")
        unit = task.fields.get("unit", "")
        done = int(task.completed)
        shown = f"{done}/{int(task.total)}" if task.total is not None else f"{done}"
        return Text(f"{shown} {unit}".rstrip(), style="progress.download")


class _Rate(ProgressColumn):
    """``95.2/s`` (of the count's unit) over rich's recent samples; nothing before any."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None or not task.fields.get("bar", True):
            return Text("")
        return Text(f"{speed:.1f}/s", style="progress.data.speed")


class _Spinner(SpinnerColumn):
    """The spinner; ✓ when done, and a dash on a stage cut short (the next one began)."""

    def render(self, task: Task) -> RenderableType:
        return Text("-", style="yellow") if task.fields.get("cut") else super().render(task)


class _Rows(Progress):
    """rich's display, with the rows of stages first and the running counts under them."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(sorted(self.tasks, key=lambda t: bool(t.fields.get("tally"))))


class _Bar(BarColumn):
    """The bar, except on a row that only says something (the model's row)."""

    def render(self, task: Task) -> Any:
        return super().render(task) if task.fields.get("bar", True) else Text("")
