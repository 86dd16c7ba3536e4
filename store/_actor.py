"""SessionActor: the one owner of a session's files inside this process.

SPEC §1 names the weakness this removes: node files are unlocked, so a
marker merged while another component rewrites the same node is lost
wholesale. Here nothing rewrites a node except this actor, one message at
a time: every append, metadata merge, head move, rewind and walk goes
through its mailbox, and :class:`~store._session.SessionCore` takes
``<sid>/.lock`` around each mutation for owners in other processes.

Each mutation is one message and one worker-thread hop (``run_durable``):
the core does all of a mutation's file work in one synchronous call.
Reads answer from the in-memory index on the event loop: the fingerprint
is checked once per message (two ``stat`` calls) and a rebuild after an
outside write hops to a thread.

Every mutation is one record in the session journal (``store._journal``):
one flush, then the files are installed unsynced. The checkpoint that syncs
those files and truncates the journal runs when the mailbox has drained (a
``CheckpointJournal`` message queued behind the work: after a merge or a
rewind, and after appends once ``CHECKPOINT_AFTER`` records are waiting) and
when the actor stops, so the fsyncs a mutation saves are paid off its
critical path.

Subclasses (the memory runtime's session actor) add their own messages by
overriding :meth:`dispatch` and calling ``super().dispatch`` for the rest,
and react to appends in :meth:`tip_moved`.

Redelivery after a crash (``actors.Idempotent``): reads, ``SetHead``, ``MergeHeads``,
``MergeMetadata`` (a merge of fixed values) and ``CheckpointJournal`` are
delivered again to the next incarnation; so is an ``Append`` whose message
carries its own id (appends are idempotent by client id,
:meth:`~store._session.SessionCore.append_turn`). An append without an id,
``RewindTo`` (a second one refuses: the turn is no longer on the head
chain), ``SpawnBranch`` and ``InsertSummary`` (fresh ids) are not: their
caller gets ``ActorCrashedError`` and the effect may have happened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

from actors import (
    Actor,
    ActorError,
    ActorRef,
    Idempotent,
    Request,
    StopReason,
    UnhandledMessageError,
)

from ._durable import run_durable
from ._errors import StoreError
from ._message import node_to_message
from ._options import SessionOptions
from ._session import SessionCore
from ._session_reads import DEFAULTS

__all__ = [
    "Append",
    "CheckpointJournal",
    "FindNodes",
    "GetBranch",
    "GetMeta",
    "InsertSummary",
    "ListBranches",
    "MergeHeads",
    "MergeMetadata",
    "RewindTo",
    "SessionActor",
    "SessionMessage",
    "SetHead",
    "SpawnBranch",
    "TipMoved",
]


# Appends queue a checkpoint once this many records wait, well before the
# core's own limit makes an append pay one inline.
CHECKPOINT_AFTER = 32

# -- messages -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Append(Idempotent, Request[dict[str, Any]]):
    """Append one turn (a message dict); replies with its message view.

    Redelivered after a crash only if the message carries its own ``id``: a
    repeat then returns the node the first delivery wrote. ``created_at``:
    the turn's own time (seconds since the epoch, not in the future), for
    imported history; None stamps it now
    (:meth:`~store._session.SessionCore.append_turn`).
    """

    message: Mapping[str, Any]
    created_at: float | None = None

    @property
    def idempotent(self) -> bool:
        return bool(self.message.get("id"))


@dataclass(frozen=True, slots=True)
class GetBranch(Idempotent, Request[list[dict[str, Any]]]):
    """Message dicts root→tip of the branch ending at ``tip`` (default: head)."""

    tip: str | None = None


@dataclass(frozen=True, slots=True)
class FindNodes(Idempotent, Request[dict[str, dict[str, Any]]]):
    """The message views of those of ``node_ids`` the session holds, rewound ones too.

    What an import checks before it appends anything: which of its turns are
    already there, and whether each is the same turn.
    """

    node_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListBranches(Idempotent, Request[list[dict[str, Any]]]):
    """The list_branches rows of SPEC §4."""


@dataclass(frozen=True, slots=True)
class GetMeta(Idempotent, Request[dict[str, Any]]):
    """A copy of meta.json as the actor knows it."""


@dataclass(frozen=True, slots=True)
class SetHead(Idempotent, Request[None]):
    node_id: str


@dataclass(frozen=True, slots=True)
class MergeHeads(Idempotent, Request[None]):
    """Add node ids to meta ``merged_heads`` (``SessionCore.merge_heads``)."""

    node_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RewindTo(Request[list[str]]):
    """Stamp ``rewound`` back to ``user_turn``; replies with the stamped ids."""

    user_turn: str


@dataclass(frozen=True, slots=True)
class SpawnBranch(Request[dict[str, Any]]):
    caller_node: str
    source: str
    prompt: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class InsertSummary(Request[dict[str, Any]]):
    covers_ids: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class MergeMetadata(Idempotent, Request[list[str]]):
    """``merge_node_metadata_batch``: replies with the ids whose file changed.

    Idempotent (fixed values): a redelivery names only what it changed itself.
    """

    patches: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class CheckpointJournal(Idempotent):
    """Sync the journaled files and truncate the journal; queued behind the work."""


@dataclass(frozen=True, slots=True)
class TipMoved:
    """An append landed: ``node`` is its message view, ``head`` the head after it.

    ``replayed``: the append repeated a turn already there (its id); nothing
    was written, and ``head_moved`` says whether the head is on that turn, so
    a reaction a crash interrupted runs again.
    """

    session: str
    node: Mapping[str, Any] = field(repr=False)
    head: str | None
    head_moved: bool
    replayed: bool = False


# What a SessionActor takes: the operations of SPEC §4 and its own checkpoint.
SessionMessage = (
    Append | GetBranch | FindNodes | ListBranches | GetMeta | SetHead | MergeHeads | RewindTo
    | SpawnBranch | InsertSummary | MergeMetadata | CheckpointJournal
)

# The messages a session actor takes: SessionMessage, or more in a subclass.
M_contra = TypeVar("M_contra", contravariant=True)

# -- the actor ------------------------------------------------------------------


# Messages whose SessionCore call refreshes the index under the session lock.
_CHECKED_UNDER_LOCK = (
    Append, SetHead, MergeHeads, RewindTo, SpawnBranch, InsertSummary, MergeMetadata
)


class SessionActor(Actor[M_contra]):
    """Owns ``<state>/sessions/<sid>``; see the module docstring.

    ``SessionActor(...)`` is a ``SessionActor[SessionMessage]``; a subclass
    that adds messages derives from ``SessionActor[SessionMessage | Its]``
    (``__init__`` refuses an ``M`` that lacks the store's own messages).

    ``StoreError`` (bad input, a missing node, a broken chain) is returned to
    the caller and the actor keeps running; anything else is a crash, and the
    restarted incarnation rebuilds its index from disk in ``on_start``.
    """

    expected_errors: ClassVar[tuple[type[Exception], ...]] = (StoreError,)

    def __init__(
        self: SessionActor[SessionMessage],
        state_dir: str | os.PathLike[str],
        session: str,
        *,
        options: SessionOptions = DEFAULTS,
    ) -> None:
        self.state_dir = os.fspath(state_dir)
        self.session = session
        self.options = options
        self._core: SessionCore | None = None
        self._open_error: StoreError | None = None
        self._retire_queued = False

    @property
    def core(self) -> SessionCore:
        if self._core is None:
            raise RuntimeError(f"session actor {self.session!r} used before on_start")
        return self._core

    async def on_start(self) -> None:
        """Open the session; a ``StoreError`` does not stop the actor.

        An unreadable meta.json, a session lock another process holds past
        the bound: the actor keeps running without a core and each message
        opens again first, so its caller gets that error (naming the file)
        instead of a stopped actor, and the first message after a repair
        just works.
        """
        try:
            await self._open()
        except StoreError as exc:
            self._open_error = exc  # the message that activated the actor gets it

    async def _open(self) -> None:
        self._core = await run_durable(
            lambda: SessionCore.open(self.state_dir, self.session, options=self.options)
        )

    async def on_stop(self, reason: StopReason) -> None:
        if self._core is None:
            return
        if reason.crash is None:
            await run_durable(self._core.close)
        else:  # a runtime log's lock goes to the restarted actor's core
            await run_durable(self._core.abandon)

    def inspect(self) -> object:
        core = self._core
        if core is None:
            return {"session": self.session, "open": False}
        return {
            "session": self.session,
            "open": True,
            "head": core.meta().get("head_id"),
            "journal_files": len(core.outstanding_journals),
            "rebuilds": core.rebuilds,
        }

    async def handle(self, message: M_contra) -> object:
        """Check freshness once (rebuilding in a thread if needed), then :meth:`dispatch`.

        A mutation checks under the session lock in its own thread hop, which
        also refreshes the index for the reads that follow it, so it skips the
        check here: two ``stat`` calls on the event loop per append, where a
        busy directory makes them slow.
        """
        if self._core is None:  # on_start could not open the session
            error, self._open_error = self._open_error, None
            if error is not None:
                raise error  # what on_start just met, not a second wait for the same lock
            await self._open()  # later messages try again
        core = self.core
        if not isinstance(message, _CHECKED_UNDER_LOCK) and core.is_stale():
            await run_durable(core.refresh)
        with core.trusting_index():
            return await self.dispatch(message)

    async def dispatch(self, message: M_contra) -> object:
        """Handle one message on a fresh index; subclasses add messages here."""
        core = self.core
        match message:
            case GetBranch(tip):
                return core.get_branch(tip)
            case ListBranches():
                return core.list_branches()
            case GetMeta():
                return core.meta()
            case FindNodes(node_ids):
                held = {node.id: node for node in core.nodes()}
                return {node_id: node_to_message(held[node_id], self.session)
                        for node_id in node_ids if node_id in held}
            case Append(msg, created_at):
                head_before = core.head
                appended = await run_durable(
                    lambda: core.append_turn(msg, created_at=created_at))
                node = appended.message
                head = core.head
                if core.journal_records >= CHECKPOINT_AFTER:
                    self._queue_checkpoint()
                moved = head != head_before if appended.created else head == node["id"]
                await self.tip_moved(TipMoved(self.session, node, head, head_moved=moved,
                                              replayed=not appended.created))
                return node
            case SpawnBranch(caller_node, source, prompt, name):
                return await run_durable(
                    lambda: core.spawn_branch(caller_node, source, prompt, name=name)
                )
            case InsertSummary(covers_ids, text):
                return await run_durable(core.insert_summary, list(covers_ids), text)
            case SetHead(node_id):
                return await run_durable(core.set_head, node_id)
            case MergeHeads(node_ids):
                return await run_durable(core.merge_heads, list(node_ids))
            case RewindTo(user_turn):
                stamped = await run_durable(core.rewind_to, user_turn)
                self._queue_checkpoint()
                return stamped
            case MergeMetadata(patches):
                changed = await run_durable(core.merge_node_metadata_batch, patches)
                self._queue_checkpoint()
                return changed
            case CheckpointJournal():
                self._retire_queued = False
                await run_durable(core.retire_journals)
                return None
        raise UnhandledMessageError(self.ref.name, message)

    async def tip_moved(self, event: TipMoved) -> None:
        """Called after every append, inside the actor; subclasses react here."""

    def _queue_checkpoint(self) -> None:
        if self._retire_queued or not self.core.outstanding_journals:
            return
        try:
            # M holds SessionMessage (``__init__`` takes no other SessionActor).
            cast("ActorRef[SessionMessage]", self.ref).cast_nowait(CheckpointJournal())
        except ActorError:
            return  # a full mailbox: the next merge, or on_stop, retires them
        self._retire_queued = True
