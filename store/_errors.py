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
    ├── InvalidRequestError            the caller asked for something the rules forbid
    │   ├── UnsafeIdError              an id or name that could escape its directory, or not be cited
    │   ├── InvalidNodeError           a field of a node or message is wrong
    │   │   ├── ReservedMetadataKeyError
    │   │   └── UnencodableValueError  lone surrogates, NaN, ints beyond 64 bits, too deep
    │   ├── OversizedContentError
    │   ├── DuplicateNodeError
    │   ├── AppendInvariantError       a top-level turn without an existing predecessor
    │   ├── NodeNotFoundError
    │   ├── SummaryHeadError           a summary may never be head
    │   └── SessionExistsError
    ├── SessionNotFoundError
    ├── CorruptFileError               a file on disk cannot be decoded (``path`` names it)
    │   ├── NodeFileError              a node file; skipped and reported, never rewritten
    │   ├── MetaFileError              meta.json
    │   └── JournalFileError           a checksummed journal record that names no file of ours
    └── BrokenChainError               a predecessor chain that does not reach its root
        └── ChainCycleError
"""

from __future__ import annotations

__all__ = [
    "AppendInvariantError",
    "BrokenChainError",
    "ChainCycleError",
    "CorruptFileError",
    "DuplicateNodeError",
    "InvalidNodeError",
    "InvalidRequestError",
    "JournalFileError",
    "MetaFileError",
    "NodeFileError",
    "NodeNotFoundError",
    "OversizedContentError",
    "ReservedMetadataKeyError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StoreError",
    "SummaryHeadError",
    "UnencodableValueError",
    "UnsafeIdError",
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
    def __init__(self, session: str, tip: str, at: str) -> None:
        super().__init__(session, tip, at, "the predecessor chain loops back on itself")
