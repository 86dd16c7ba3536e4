"""A plan appended through the runtime: what is new is appended, what is there is skipped.

Every planned turn carries the agent's own id, so importing a log again
appends only what it did not hold yet (lines appended since, new files):
the session actor's ``FindNodes`` says which ids the session holds, and only
the others are appended, parents first, each with its own time. The head
moves to the agent's last turn when anything was appended.

Before anything is appended the whole plan is checked (ids the store can
hold, times not in the future, what the store would refuse): a plan that
fails names the file and line and nothing of it is appended
(:class:`ImportLineError`). A new session is built aside and moved into
place whole, as ``import jsonl`` does (:class:`ImportFailedError`: none was
made). Appending to a session that exists goes through its actor; one that
fails part way (a full disk) leaves what was appended, and running the
import again completes it (:class:`ImportInterruptedError`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from memory._errors import ImportFailedError
from memory.importers._plan import PlannedTurn, SessionPlan
from memory.runtime import ImportInterruptedError, ImportLineError
from memory.runtime._import_staging import import_new_session
from store import CLOCK_SKEW, FindNodes, GetMeta, InvalidRequestError, StoreError, message_to_node
from store.lowlevel import citable_id_problem, encode_node, run_durable, validate_id

if TYPE_CHECKING:
    from memory.runtime import MemoryRuntime

__all__ = ["SessionImport", "apply_plan", "check_plan"]


@dataclass(frozen=True)
class SessionImport:
    """What importing one session did (or, dry, would do)."""

    agent: str
    session: str
    created: bool
    imported: int
    already: int
    summaries: int
    spawn_roots: int
    left_out: int
    unknown: dict[str, int]
    changed: tuple[str, ...] = ()  # turns whose text grew in the log after they were imported

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "session": self.session, "created": self.created,
                "imported": self.imported, "already": self.already,
                "summaries": self.summaries, "spawn_roots": self.spawn_roots,
                "left_out": self.left_out, "unknown": self.unknown,
                "changed": list(self.changed)}


def check_plan(plan: SessionPlan, now: float) -> None:
    """Raise :class:`ImportLineError` for the first turn the store would refuse."""
    for turn in plan.turns:
        for what, value in (("id", turn.id), ("caller", turn.caller or None),
                            ("predecessor", turn.predecessor)):
            if value is None or value == "ROOT":
                continue
            try:
                validate_id(value, what)
            except InvalidRequestError as exc:
                raise ImportLineError(turn.file, turn.line, str(exc).split("; nothing")[0]) \
                    from None
            problem = citable_id_problem(value)
            if problem is not None:
                raise ImportLineError(turn.file, turn.line, f"{what} {value!r}: {problem}")
        if turn.created_at is not None and turn.created_at > now + CLOCK_SKEW:
            raise ImportLineError(turn.file, turn.line,
                                  f"its time {turn.created_at!r} is in the future")
        try:  # what the store would refuse (a reserved key, a value JSON cannot hold, size)
            encode_node(message_to_node(turn.message(), plan.session, node_id=turn.id, seq=0,
                                        now=turn.created_at or 0.0), plan.session)
        except InvalidRequestError as exc:
            problem = getattr(exc, "problem", None) or str(exc).split("; nothing")[0]
            raise ImportLineError(turn.file, turn.line, str(problem)) from None


def _session_exists(state_dir: str, session: str) -> bool:
    return os.path.isfile(os.path.join(state_dir, "sessions", session, "meta.json"))


async def apply_plan(rt: MemoryRuntime, plan: SessionPlan, *,
                     dry_run: bool = False) -> SessionImport:
    """Append what of ``plan`` the session does not hold yet (``dry_run``: only count it)."""
    check_plan(plan, rt.config.clock())
    exists = await anyio.to_thread.run_sync(_session_exists, rt.state_dir, plan.session)
    held: dict[str, Any] = {}
    if exists and plan.turns:
        held = await rt.session_ref(plan.session).call(
            FindNodes(tuple(t.id for t in plan.turns)))
    todo = [t for t in plan.turns if t.id not in held]
    # A turn stays as it was appended (the store never rewrites a turn's text): a log that
    # changed a turn since (more blocks of one response, imported half way) is reported.
    changed = tuple(t.id for t in plan.turns
                    if t.id in held and held[t.id].get("content") != t.content)
    created = False
    if not dry_run and todo and not exists:
        created = await _new_session(rt, plan)
        if not created:  # made meanwhile by someone else: append what it lacks
            held = await rt.session_ref(plan.session).call(
                FindNodes(tuple(t.id for t in plan.turns)))
            todo = [t for t in plan.turns if t.id not in held]
    if not dry_run and todo and not created:
        await _append_all(rt, plan, todo)
    if not dry_run and not created:
        await _merge_spawn_tips(rt, plan, exists or bool(todo))
    return SessionImport(
        plan.agent, plan.session, created or (dry_run and not exists and bool(todo)),
        len(todo), len(plan.turns) - len(todo), sum(t.is_summary for t in todo),
        sum(t.is_spawn_root for t in todo), plan.left_out, dict(plan.unknown), changed)


async def _new_session(rt: MemoryRuntime, plan: SessionPlan) -> bool:
    """A new session built aside and moved into place whole; False if it exists meanwhile.

    As ``import jsonl`` does (:mod:`memory.runtime._import_staging`): a full
    disk or a crash leaves no half session, and nothing goes through a
    session actor turn by turn.
    """
    turns = [(t.message(), t.created_at) for t in plan.turns]
    try:
        return await run_durable(functools.partial(
            import_new_session, rt.state_dir, plan.session, plan.title, turns, plan.head,
            files=rt.config.files, clock=rt.config.clock, merged_heads=plan.spawn_tips()))
    except (OSError, StoreError) as exc:  # only the sync after the move leaves one
        made = await anyio.to_thread.run_sync(_session_exists, rt.state_dir, plan.session)
        raise ImportFailedError(plan.files[0], plan.session, exc, installed=made) from exc


async def _append_all(rt: MemoryRuntime, plan: SessionPlan, todo: list[PlannedTurn]) -> None:
    appended = 0
    for turn in todo:
        try:
            await rt.sessions.append(plan.session, turn.message(), created_at=turn.created_at)
        except Exception as exc:
            raise ImportInterruptedError(turn.file, turn.line, plan.session, appended,
                                         exc) from exc
        appended += 1
    if plan.head is not None:  # recall ranks the head's branch first: the agent's last one
        try:
            await rt.sessions.set_head(plan.session, plan.head)
        except Exception as exc:
            raise ImportInterruptedError(plan.files[0], 0, plan.session, appended,
                                         exc) from exc


async def _merge_spawn_tips(rt: MemoryRuntime, plan: SessionPlan, exists: bool) -> None:
    """Name each spawn branch's tip a merged head unless the session already does.

    A sub-agent's branch is work its caller got back: the boundary writes it
    completely rather than waiting for its owed tokens (docs/decisions.md).
    A branch that grew since the last pass gets its new tip merged too.
    """
    tips = plan.spawn_tips()
    if not tips or not exists:
        return
    meta = await rt.session_ref(plan.session).call(GetMeta())
    merged = meta.get("merged_heads")
    missing = [t for t in tips if not isinstance(merged, list) or t not in merged]
    if not missing:
        return
    try:
        await rt.sessions.merge_heads(plan.session, missing)
    except Exception as exc:
        raise ImportInterruptedError(plan.files[0], 0, plan.session, 0, exc) from exc
