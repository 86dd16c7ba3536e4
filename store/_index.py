"""The in-memory index of one session, and the fingerprint that says when it is stale.

Every read (a branch walk, the tips, what a branch owes) needs the whole
DAG's structure; reading hundreds of node files per read would make the
store unusable. So the owner of a session (the session actor) keeps an
index: node id → node, file name, children in seq order, the highest seq,
and the files it had to skip. It is built once from disk and kept current by
the owner's own writes.

Writes by *another* process are detected by :class:`Fingerprint` (SPEC §4):
the mtime of ``history/`` (any rename into it, new node or rewritten node,
changes it) and meta.json's mtime and size. The owner records the
fingerprint after each of its own writes, under the session lock, so only a
foreign write makes it differ, and a stale index is rebuilt once, not on
every read. Single files written under the session lock (the session
journal, a claim) are watched the same way, by their :func:`file_stamp`.

Building is deliberately lean (one ``listdir``, one read and one orjson
parse per file, one dataclass per node): a cold load must cost at most 1.3x
the bare read + parse of the same files.
"""

from __future__ import annotations

import gc
import itertools
import os
import time
from dataclasses import dataclass, field

from ._errors import NodeFileError, StoreError
from ._format import decode_node, encode_node, node_filename, parse_filename
from ._node import ROLE_LETTERS, Node

__all__ = ["FileStamp", "Fingerprint", "SessionIndex", "file_stamp", "load_index", "read_capped"]

HISTORY = "history"
META = "meta.json"
# Reserved beside them for the owner's batch claim (memory.runtime._claims); never read here.
CLAIM_NAME = ".claim"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    history_mtime_ns: int
    meta_mtime_ns: int
    meta_size: int

    @classmethod
    def of(cls, session_dir: str) -> Fingerprint:
        return cls.of_paths(os.path.join(session_dir, HISTORY), os.path.join(session_dir, META))

    @classmethod
    def of_paths(cls, history_dir: str, meta_file: str) -> Fingerprint:
        """:meth:`of` for an owner that joined the two paths once (it asks at every message)."""
        try:
            history = os.stat(history_dir).st_mtime_ns
        except OSError:
            history = 0
        try:
            meta = os.stat(meta_file)
            return cls(history, meta.st_mtime_ns, meta.st_size)
        except OSError:
            return cls(history, 0, 0)


FileStamp = tuple[int, int, int]  # inode, size, mtime_ns


def file_stamp(path: str) -> FileStamp | None:
    """``path``'s inode, size and mtime now (None: absent).

    A rename, an append or a rewrite moves it, so whoever remembers the
    stamp of what it last read or wrote can tell with one ``stat`` whether
    anyone changed the file since, and skip re-reading it when nobody did.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


_VERSIONS = itertools.count(1)  # next() is atomic: indexes of several threads share it
ADDS_KEPT = 256  # adds an index remembers (SessionIndex.added_since)


@dataclass
class SessionIndex:
    """Structure of one session's DAG; nodes in seq order."""

    nodes: dict[str, Node] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # node id -> history file name
    children: dict[str, list[str]] = field(default_factory=dict)  # predecessor -> ids
    max_seq: int = -1
    # Unparsable node files: skipped (their nodes are unknown) and reported.
    problems: list[NodeFileError] = field(default_factory=list)
    # node id -> hash of the file bytes its node was decoded from, for the
    # nodes loaded from disk and not changed since (see load_index).
    digests: dict[str, int] = field(default_factory=dict)
    # node id -> the stamp of the file those bytes were read from, if it had
    # settled then: a reload keeps the node of a file whose stamp did not
    # move without reading it (see load_index, SETTLED_NS).
    stamps: dict[str, NodeStamp] = field(default_factory=dict)
    # A number no other index state has had (in this process), new on every
    # add and replace: whoever derived something from the index at one
    # version can tell it is unchanged, or which nodes were added since.
    version: int = field(default_factory=lambda: next(_VERSIONS))
    # (version before, node id) of the latest adds since the last replace, oldest first.
    adds: list[tuple[int, str]] = field(default_factory=list)

    def add(self, node: Node, filename: str | None = None) -> None:
        """Index a node that is newer (higher seq) than every indexed node."""
        self.adds.append((self.version, node.id))
        if len(self.adds) > ADDS_KEPT:
            del self.adds[: len(self.adds) - ADDS_KEPT]
        self.version = next(_VERSIONS)
        self.nodes[node.id] = node
        self.files[node.id] = filename if filename is not None else node_filename(node)
        self.digests.pop(node.id, None)
        self.stamps.pop(node.id, None)
        if node.predecessor is not None:
            self.children.setdefault(node.predecessor, []).append(node.id)
        self.max_seq = max(self.max_seq, node.seq)

    def replace(self, node: Node) -> None:
        """Swap in a node whose structure is unchanged (a metadata merge)."""
        self.version = next(_VERSIONS)
        self.adds.clear()
        self.nodes[node.id] = node
        self.digests.pop(node.id, None)  # its bytes are no longer the ones loaded
        self.stamps.pop(node.id, None)

    def first_node(self) -> Node | None:
        """The node with the lowest seq (dict order is seq order)."""
        return next(iter(self.nodes.values()), None)

    def added_since(self, version: int) -> list[str] | None:
        """The ids of the nodes added since ``version``, oldest first; None if anything else changed.

        None also when ``version`` is not this index's, or too many adds ago.
        """
        if version == self.version:
            return []
        for position, (before, _) in enumerate(self.adds):
            if before == version:
                return [node_id for _, node_id in self.adds[position:]]
        return None

    def same_nodes(self, other: SessionIndex) -> bool:
        """The same node objects under the same file names, and the same skipped files."""
        if len(self.nodes) != len(other.nodes) or self.files != other.files:
            return False
        if any(other.nodes.get(node_id) is not node for node_id, node in self.nodes.items()):
            return False
        return [str(p) for p in self.problems] == [str(p) for p in other.problems]


def read_capped(path: str, rel: str, cap: int) -> bytes:
    """A node file's bytes; an oversized file is refused before it is read into memory."""
    return read_stamped(path, rel, cap)[0]


NodeStamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns
SETTLED_NS = 100_000_000
"""How long before a read a node file must have last changed for its stamp to vouch for it.

Timestamps tick coarsely (a jiffy, up to 10 ms): a change in the same tick as
the one before it leaves them as they were. A change made after a read falls
in a tick at or after the read's, so a file whose ctime was well before the
read (ctime, which no ``utime`` can set back) shows any later change in its
stamp. A file read sooner after its last change is read again next time.
"""


def node_stamp(stat: os.stat_result) -> NodeStamp:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def read_stamped(path: str, rel: str, cap: int) -> tuple[bytes, NodeStamp | None]:
    """:func:`read_capped`, and the file's stamp if it had settled when read (else None).

    The stamp is the descriptor's own ``fstat``: the very file read.
    """
    read_at = time.time_ns()
    # Plain descriptors: the size check costs no more syscalls than open().read().
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        stat = os.fstat(fd)
        size = stat.st_size
        if size > cap:
            raise NodeFileError(rel, f"{size} bytes, over the cap of {cap}")
        data = os.read(fd, size)
        while len(data) < size:  # a short read: keep going until EOF
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    settled = stat.st_ctime_ns < read_at - SETTLED_NS
    return data, node_stamp(stat) if settled else None


def load_index(
    session_dir: str, rel_dir: str, cap: int, previous: SessionIndex | None = None
) -> SessionIndex:
    """Read every node file of ``session_dir/history`` into a fresh index.

    ``rel_dir`` is the session directory relative to the state directory,
    used to name files in errors. Temp files and foreign files are ignored;
    unparsable node files are recorded in ``problems``.

    Without ``previous`` every file is read. With ``previous`` (the index
    this one replaces), a file whose stamp (inode, size, mtime, ctime) is the
    one ``previous`` read it with, when it had settled (:data:`SETTLED_NS`),
    is not read again: a write since would have moved its ctime. Another file whose
    name and bytes are those ``previous`` decoded its node from (a 64-bit
    hash of them), or, for a node ``previous`` holds from our own write,
    exactly its encoding, keeps that very node object instead of being
    parsed again. So the reload the lost-marker scan asks for on every
    changed session costs a stat per unchanged file, and whoever caches by
    node identity (the ledger's records) keeps its cache. Any other byte
    difference is parsed.
    """
    history = os.path.join(session_dir, HISTORY)
    try:
        names = os.listdir(history)
    except FileNotFoundError:
        names = []
    entries: list[tuple[int, str, str, str]] = []
    for name in names:
        parsed = parse_filename(name)
        if parsed is not None:
            entries.append((parsed[0], name, parsed[1], parsed[2]))
    entries.sort()
    index = SessionIndex()
    # Every parsed node stays alive in the index, so the cyclic GC would
    # re-scan the growing heap many times during the load (a third of its
    # cost, measured); parsed JSON holds no cycles, so pausing it is safe.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _load_entries(index, history, rel_dir, cap, entries, previous)
    finally:
        if was_enabled:
            gc.enable()
    return index


def _encodes_to(node: Node, data: bytes, cap: int) -> bool:
    """Whether ``data`` is exactly the file our own write of ``node`` installs."""
    try:
        return encode_node(node, "", cap) == data
    except StoreError:
        return False


def _load_entries(
    index: SessionIndex, history: str, rel_dir: str, cap: int,
    entries: list[tuple[int, str, str, str]], previous: SessionIndex | None,
) -> None:
    known = previous.digests if previous is not None else {}
    stamped = previous.stamps if previous is not None else {}
    for seq, name, letter, file_id in entries:
        rel = f"{rel_dir}/{HISTORY}/{name}"
        path = os.path.join(history, name)
        try:
            held = previous.nodes.get(file_id) if previous is not None else None
            if previous is None or previous.files.get(file_id) != name:
                held = None
            stamp = (node_stamp(os.stat(path)) if held is not None and file_id in stamped
                     and file_id in known else None)
            if held is not None and stamp is not None and stamp == stamped[file_id]:
                # The very file read before, settled then, so any change since
                # would have moved its ctime: not read again.
                node, digest = held, known[file_id]
            else:
                data, stamp = read_stamped(path, rel, cap)
                digest = hash(data)
                if held is not None and (known.get(file_id) == digest or (
                        file_id not in known and _encodes_to(held, data, cap))):
                    node = held  # the same bytes, decoded and checked before (or written from it)
                else:
                    node = decode_node(data, rel, cap)
                    if node.id != file_id or node.seq != seq or ROLE_LETTERS[node.role] != letter:
                        raise NodeFileError(rel,
                                            "its id, seq or role does not match its file name")
            if node.id in index.nodes:
                raise NodeFileError(rel, f"node id {node.id!r} is already used by another file")
        except NodeFileError as exc:
            index.problems.append(exc)
            continue
        except OSError as exc:
            index.problems.append(NodeFileError(rel, f"unreadable ({exc.strerror})"))
            continue
        index.add(node, name)
        index.digests[node.id] = digest
        if stamp is not None:
            index.stamps[node.id] = stamp
