"""What a transaction takes and what a writer reads: topic edits and a snapshot.

A writer never touches the workspace: it reads a :class:`WorkspaceSnapshot`
(the topics at one ``workspace_revision``) and returns :class:`TopicEdit`
values, which the transaction (SPEC §5, Transactions) checks and installs all
or nothing. Both are workspace formats, so they live here, below the writers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

__all__ = ["CpuRunner", "TopicEdit", "WorkspaceSnapshot"]

_Result = TypeVar("_Result")


class CpuRunner(Protocol):
    """Runs a pure, CPU-bound function of picklable arguments, maybe in another process.

    Called from a worker thread (it blocks until the result is in); returns
    ``fn(*args)`` exactly as calling it here would, and raises what it raises.
    Where the work runs (a worker process, off the interpreter lock, or this
    thread) is the runner's business: :class:`memory.writers.CpuWorker`.
    """

    def __call__(self, fn: Callable[..., _Result], /, *args: Any) -> _Result: ...


@dataclass(frozen=True, slots=True)
class TopicEdit:
    """Replace one topic file with ``text`` (writer form), or delete it (``text=None``).

    ``path`` is relative to ``<state>/memory`` and must lie under ``topics/``.
    A block id present in the base but absent from ``text`` is refused unless
    it is listed in ``delete_blocks``: memory never loses a unit by accident.
    """

    path: str
    text: str | None
    delete_blocks: frozenset[str] = frozenset()
    tool: str = "write_topic"


@dataclass(frozen=True, slots=True)
class WorkspaceSnapshot:
    """A read-only view of the topics at one ``workspace_revision``.

    ``read(path)`` returns a topic file's text at that revision; files are read
    lazily because a workspace may hold thousands of them. ``read`` blocks (it
    opens the file): call it from a worker thread, never on the event loop's
    thread (the built-in writer runs its whole extraction in one).
    """

    revision: str
    topic_paths: tuple[str, ...]
    read: Callable[[str], str] = field(repr=False)
    # check(edits, batch_sources): the audit a commit of ``edits`` would give now,
    # installing nothing (a model writer's repair loop); None where nobody serves it.
    check: Callable[[Sequence[TopicEdit], frozenset[str]],
                    Awaitable[Sequence[Mapping[str, Any]]]] | None = field(
        default=None, repr=False, compare=False)
    # Where a writer may run its pure CPU work (off the interpreter lock); None: its own thread.
    run_cpu: CpuRunner | None = field(default=None, repr=False, compare=False)
