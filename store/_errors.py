"""Every error the session store raises, under one root.

A caller of the store needs to tell three things apart: *you* asked for
something the rules forbid (a hostile id, a reserved metadata key, a summary
as head), *the disk* holds something the store cannot read (a truncated node
file, a broken chain), and *the session* is not there. Each error names the
session, the node and the file (relative to the state directory) and says
what to do next; the message is built in ``__init__`` so every raise site
reads the same.

::

    StoreError
    ├── InvalidRequestError                  the caller asked for something the rules forbid
    │   ├── UnsafeIdError                    an id or name that could escape its directory, or not be cited
    │   ├── InvalidNodeError                 a field of a node or message is wrong
    │   │   ├── ReservedMetadataKeyError
    │   │   └── UnencodableValueError        lone surrogates, NaN, ints beyond 64 bits, too deep
    │   ├── OversizedContentError
    │   ├── DuplicateNodeError
    │   │   └── AppendConflictError          an append repeats a client id with a different turn
    │   ├── AppendInvariantError             a top-level turn without an existing predecessor
    │   ├── NodeNotFoundError
    │   ├── SummaryHeadError                 a summary may never be head
    │   └── SessionExistsError
    ├── SessionNotFoundError
    │   └── MetaMissingError                 history/ without meta.json: turns nobody can see
    ├── UnsafeLinkError                      a symbolic link the state directory rule refuses
    ├── CorruptFileError                     a file on disk cannot be decoded (``path`` names it)
    │   ├── NodeFileError                    a node file; skipped and reported, never rewritten
    │   ├── MetaFileError                    meta.json
    │   │   └── HeadFieldError               its head_id is not null and names no node
    │   └── JournalFileError                 a checksummed journal record that names no file of ours
    ├── BrokenChainError                     a predecessor chain that does not reach its root
    │   └── ChainCycleError
    └── SessionLockTimeoutError              another process held ``<sid>/.lock`` past the bound
"""

from __future__ import annotations

__all__ = [
    "AppendConflictError",
    "AppendInvariantError",
    "BrokenChainError",
    "ChainCycleError",
    "CorruptFileError",
    "DuplicateNodeError",
    "FutureTimestampError",
    "HeadFieldError",
    "InvalidNodeError",
    "InvalidRequestError",
    "JournalFileError",
    "MetaFileError",
    "MetaMissingError",
    "NodeFileError",
    "NodeNotFoundError",
    "OversizedContentError",
    "ReservedMetadataKeyError",
    "SessionExistsError",
    "SessionLockTimeoutError",
    "SessionNotFoundError",
    "StoreError",
    "SummaryHeadError",
    "UnencodableValueError",
    "UnsafeIdError",
    "UnsafeLinkError",
]


class StoreError(Exception):
    """Root of every error raised by ``store``."""


class InvalidRequestError(StoreError):
    """The request breaks a rule of SPEC §4; nothing was changed."""


class UnsafeIdError(InvalidRequestError):
    def __init__(self, kind: str, value: str, reason: str, session: str | None = None) -> None:
        self.kind, self.value, self.reason, self.session = kind, value, reason, session
        where = f" in session {session!r}" if session is not None else ""
        super().__init__(
            f"unsafe {kind} {value[:80]!r}{where}: {reason}; nothing was touched. "
            "Use ids of printable characters without blanks, '/', '\\', '..', NUL "
            "or any of # ( ) [ ] < > ,."
        )


class InvalidNodeError(InvalidRequestError):
    def __init__(self, session: str, node: str, problem: str) -> None:
        self.session, self.node, self.problem = session, node, problem
        super().__init__(
            f"node {node!r} of session {session!r} is invalid: {problem}; nothing was written."
        )


class ReservedMetadataKeyError(InvalidNodeError):
    def __init__(self, session: str, node: str, key: str) -> None:
        self.key = key
        super().__init__(
            session, node,
            f"metadata key {key!r} is reserved by the message view (SPEC §4); rename it",
        )


class UnencodableValueError(InvalidNodeError):
    def __init__(self, session: str, node: str, problem: str) -> None:
        super().__init__(session, node, f"{problem}; such a value cannot be stored as JSON")


class FutureTimestampError(InvalidNodeError):
    """A turn's ``created_at`` lies ahead of this machine's clock by more than the allowed skew.

    An imported turn keeps its own time; a time still to come is a mistake
    (milliseconds for seconds, a wrong year) that would put the turn after
    every later one in memory's timeline.
    """

    def __init__(self, session: str, node: str, created_at: float, now: float,
                 skew: float) -> None:
        self.created_at, self.now, self.skew = created_at, now, skew
        super().__init__(
            session, node,
            f"created_at {created_at!r} is {created_at - now:,.0f} s ahead of this clock "
            f"({now:.0f}; at most {skew:g} s of skew is allowed); give seconds since the "
            "epoch, not milliseconds, no later than now",
        )


class OversizedContentError(InvalidRequestError):
    def __init__(self, session: str, node: str, size: int, cap: int) -> None:
        self.session, self.node, self.size, self.cap = session, node, size, cap
        super().__init__(
            f"node {node!r} of session {session!r} encodes to {size} bytes, over the cap of "
            f"{cap}; store large content elsewhere or raise max_node_bytes."
        )


class DuplicateNodeError(InvalidRequestError):
    def __init__(self, session: str, node: str) -> None:
        self.session, self.node = session, node
        super().__init__(
            f"session {session!r} already holds node {node!r}; nodes are append-only, "
            "choose a new id."
        )


class AppendConflictError(DuplicateNodeError):
    """An append reuses a node id the session holds, for a different turn.

    An append repeated with the same id and the same turn returns the
    existing node (appends are idempotent by client id); ``fields`` names
    the identity fields (message-view names) that differ.
    """

    def __init__(self, session: str, node: str, fields: tuple[str, ...]) -> None:
        self.session, self.node, self.fields = session, node, fields
        InvalidRequestError.__init__(
            self,
            f"session {session!r} already holds node {node!r} with a different "
            f"{', '.join(fields)}; nothing was written. An append repeated with the same id "
            "must repeat the same turn (it then returns the existing node); give a new turn "
            "a new id.",
        )


class AppendInvariantError(InvalidRequestError):
    def __init__(self, session: str, node: str, predecessor: str | None) -> None:
        self.session, self.node, self.predecessor = session, node, predecessor
        super().__init__(
            f"cannot append top-level turn {node!r} to session {session!r}: its predecessor "
            f"{predecessor!r} is not a node of the session (only the first turn, a root, a "
            "spawn root or a summary may start a chain); append the predecessor first."
        )


class NodeNotFoundError(InvalidRequestError):
    def __init__(self, session: str, node: str) -> None:
        self.session, self.node = session, node
        super().__init__(f"session {session!r} has no node {node!r}; list its branches first.")


class SummaryHeadError(InvalidRequestError):
    def __init__(self, session: str, node: str) -> None:
        self.session, self.node = session, node
        super().__init__(
            f"node {node!r} of session {session!r} is a summary (covers_ids) and may never be "
            "head; set the head to a turn on the branch instead."
        )


class SessionExistsError(InvalidRequestError):
    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session!r} already exists; open it instead of creating it.")


class SessionNotFoundError(StoreError):
    def __init__(self, session: str, path: str) -> None:
        self.session, self.path = session, path
        super().__init__(
            f"session {session!r} does not exist ({path}/meta.json missing); create it first."
        )


class MetaMissingError(SessionNotFoundError):
    """A session directory holds node files but no meta.json: its turns would be invisible."""

    def __init__(self, session: str, path: str, node_files: int) -> None:
        self.session, self.path, self.node_files = session, path, node_files
        StoreError.__init__(
            self,
            f"session {session!r} has node files but no meta.json ({path}/meta.json missing, "
            f"{path}/history holds {node_files} node file(s)): none of its turns can be listed "
            "or written. Restore meta.json from a backup, or recreate it as "
            f'{{"id": "{session}", "title": "", "created_at": 0, "updated_at": 0, '
            '"head_id": "<the id of the branch tip>"}.',
        )


class UnsafeLinkError(StoreError):
    """A symbolic link inside the state directory that cannot be followed safely.

    Directory links are followed for reads and writes alike (docs/decisions.md,
    "Symbolic links in the state directory"); this is everything else: a
    link in place of a file scriptorium replaces, a loop, one directory
    reached under two names.
    """

    def __init__(self, path: str, problem: str, fix: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; nothing was written there. {fix}")


class CorruptFileError(StoreError):
    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(
            f"{path} cannot be read: {problem}. The file was left untouched; restore it from "
            "a backup or remove it."
        )


class NodeFileError(CorruptFileError):
    """An unparsable node file: skipped by the index, reported, never rewritten."""


class MetaFileError(CorruptFileError):
    """An unparsable meta.json."""


class HeadFieldError(MetaFileError):
    """meta.json's ``head_id`` is neither null nor the id of a readable node."""

    def __init__(self, path: str, head: object, problem: str) -> None:
        self.path, self.head, self.problem = path, head, problem
        StoreError.__init__(
            self,
            f"{path}: head_id {head!r:.80} {problem}; nothing was read or written from that "
            "head. Set head_id to the id of the tip the session is on (scriptorium session "
            "branches), or to null for the trunk tip.",
        )


class JournalFileError(CorruptFileError):
    """A journal record passed its checksum but is not scriptorium's: mutations are refused."""

    def __init__(self, path: str, offset: int, problem: str) -> None:
        self.offset = offset
        StoreError.__init__(
            self,
            f"{path} cannot be replayed: the record at byte {offset} passed its checksum but "
            f"{problem}, so it was not written by scriptorium. The journal was left untouched "
            "and the session refuses changes until it is moved away (reads still work).",
        )
        self.path, self.problem = path, problem


class BrokenChainError(StoreError):
    def __init__(self, session: str, tip: str, at: str, problem: str) -> None:
        self.session, self.tip, self.at = session, tip, at
        super().__init__(
            f"the branch of session {session!r} ending at {tip!r} is broken at {at!r}: "
            f"{problem}. Check that node's file (and the skipped files reported on open)."
        )


class ChainCycleError(BrokenChainError):
    def __init__(self, session: str, tip: str, at: str, loop: tuple[str, ...] = ()) -> None:
        self.loop = loop
        shown = " -> ".join(repr(n) for n in (*loop[:8], loop[0])) if loop else ""
        super().__init__(
            session, tip, at, "the predecessor chain loops back on itself"
            + (f" ({shown}{' ...' if len(loop) > 8 else ''})" if loop else ""),
        )


class SessionLockTimeoutError(StoreError):
    """Another owner held the session lock longer than the bound: stuck, or the bound is too short."""

    def __init__(self, session: str, path: str, waited: float, holder: int | None) -> None:
        self.session, self.path, self.waited, self.holder = session, path, waited, holder
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(
            f"session {session!r} is locked: {who} has held {path} for more than {waited:.3g} s, "
            "so nothing was changed. If that process is stuck, stop it; otherwise retry, or "
            "raise the lock timeout."
        )
