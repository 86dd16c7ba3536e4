"""Branch walks and tip rules over a session index: pure functions, no I/O.

A session is a DAG whose conversation edges are ``predecessor`` links; a
branch is what you get by walking them back from a tip (SPEC §4). These
rules decide what memory sees, so they live here, apart from files and
actors, and are tested on the reference agent's own fixture:

* :func:`branch` walks root→tip and drops nodes with ``display="root"`` or
  ``rewound``; a walk ends at ``"ROOT"`` or at a ``null`` predecessor on a
  legal terminus (spawn root, the session's first node, a summary), and any
  other end is a :class:`~store._errors.BrokenChainError` (or a cycle).
* :func:`list_tips` applies the tip rules: candidates, "continues the
  conversation", merged heads, the trunk tip, ``summary_`` ids.
* :func:`rewind_ids` and :func:`absorbed_covers` compute what a rewind stamps
  and what a rolling summary covers.
* :func:`check_new_node` is the other side of :func:`branch`: what may join
  the DAG, so that every walk from a new node ends where a walk may end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ._errors import (
    AppendInvariantError,
    BrokenChainError,
    ChainCycleError,
    DuplicateNodeError,
    InvalidNodeError,
    NodeNotFoundError,
)
from ._format import check_value
from ._ids import validate_id
from ._index import SessionIndex
from ._message import check_metadata_keys
from ._node import ROOT, Node

__all__ = [
    "absorbed_covers",
    "branch",
    "branch_row",
    "chain",
    "check_new_node",
    "continues_conversation",
    "is_tip_candidate",
    "list_tips",
    "predecessor_cycles",
    "rewind_ids",
    "trunk_tip",
]


def _legal_terminus(index: SessionIndex, node: Node) -> bool:
    first = index.first_node()
    return node.is_spawn_root or node.is_summary or (first is not None and first.id == node.id)


def chain(index: SessionIndex, session: str, tip: str) -> list[Node]:
    """Every node from the start of ``tip``'s chain to ``tip``, root→tip, nothing dropped."""
    node = index.nodes.get(tip)
    if node is None:
        raise NodeNotFoundError(session, tip)
    seen = {tip}
    walked = [node]
    while True:
        predecessor = node.predecessor
        if predecessor == ROOT:
            break
        if predecessor is None:
            if _legal_terminus(index, node):
                break
            raise BrokenChainError(
                session, tip, node.id,
                "its predecessor is null but it is no spawn root, summary or first node",
            )
        if predecessor in seen:
            raise ChainCycleError(session, tip, predecessor)
        following = index.nodes.get(predecessor)
        if following is None:
            raise BrokenChainError(
                session, tip, node.id, f"its predecessor {predecessor!r} is not in the session"
            )
        seen.add(predecessor)
        walked.append(following)
        node = following
    walked.reverse()
    return walked


def predecessor_cycles(nodes: Iterable[Node]) -> list[list[str]]:
    """Every loop of predecessor edges, each as its node ids in walk order (pure, linear).

    A node on a loop reaches no root, so no walk ends and no drawing starts
    there: callers that look at the whole session (``session show``, the
    audit) ask this instead of finding nothing.
    """
    predecessor = {n.id: n.predecessor for n in nodes}
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    loops: list[list[str]] = []
    for start in predecessor:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node in predecessor and node not in state:
            state[node] = 1
            walk.append(node)
            node = predecessor[node]
        if node is not None and state.get(node) == 1:
            loops.append(walk[walk.index(node):])
        for seen in walk:
            state[seen] = 2
    return loops


def drawing_tree(nodes: Iterable[Node]) -> tuple[list[Node], dict[str, list[Node]]]:
    """The session as a person sees it (pure): roots, and each node's children by ``seq``.

    A node hangs under its predecessor, a spawned sub-agent branch's root
    under the node that spawned it; nodes on a predecessor loop are
    nobody's child and no root (:func:`predecessor_cycles` names them).
    ``session show`` and the web inspector draw this same tree.
    """
    ordered = sorted(nodes, key=lambda n: n.seq)
    by_id = {n.id: n for n in ordered}
    children: dict[str, list[Node]] = {}
    roots: list[Node] = []
    for node in ordered:
        if node.predecessor in by_id:
            children.setdefault(node.predecessor, []).append(node)
        elif node.is_spawn_root and node.caller in by_id:
            children.setdefault(node.caller, []).append(node)
        else:
            roots.append(node)
    return roots, children


def branch(index: SessionIndex, session: str, tip: str) -> list[Node]:
    """The visible branch ending at ``tip``: :func:`chain` minus roots and rewound turns."""
    return [n for n in chain(index, session, tip) if n.display != "root" and not n.rewound]


def visible_back_from(index: SessionIndex, tip: str) -> Iterator[Node]:
    """The visible nodes of ``tip``'s branch, newest first, lazily.

    The ledger asks "what follows the newest own marker?", which a walk back
    from the tip answers in as many steps as the backlog, whatever the
    session's size (SPEC §1: the marker walk stays flat as sessions grow).
    The walk just ends at a missing node, a cycle or the chain's start; a
    caller that needs the whole branch validated uses :func:`branch`.
    """
    seen: set[str] = set()
    node = index.nodes.get(tip)
    while node is not None and node.id not in seen:
        seen.add(node.id)
        if node.display != "root" and not node.rewound:
            yield node
        if node.predecessor is None or node.predecessor == ROOT:
            return
        node = index.nodes.get(node.predecessor)


def _inside_function_run(index: SessionIndex, node: Node) -> bool:
    """Called by something other than a conversational turn (or by the spawn of one)."""
    if node.caller in ("", ROOT):
        return False
    caller = index.nodes.get(node.caller)
    return caller is None or not caller.is_conversational


def is_tip_candidate(index: SessionIndex, node: Node) -> bool:
    if node.caller not in ("", ROOT) and (
        not node.is_conversational or _inside_function_run(index, node)
    ):
        return False
    return node.display != "root" and not node.is_context and not node.is_attach


def continues_conversation(index: SessionIndex, child: Node) -> bool:
    return (
        child.is_conversational
        and child.display not in ("root", "runtime")
        and not child.is_attach
        and not child.is_context
        and not _inside_function_run(index, child)
    )


def trunk_tip(index: SessionIndex) -> str | None:
    """Follow first children from the earliest top-level conversation start.

    "First child" is the first registered child (seq order) of any kind,
    attach rows, runtime rows and tool calls included, as the reference
    agent walks it (SPEC §4): the trunk may end on a node that is no tip
    candidate, and is listed all the same.
    Summaries are not trunk starts: a summary is spliced in *before* the
    range it covers, so starting there would end the trunk at the summary.
    """
    starts = [
        n for n in index.nodes.values()
        if n.is_top_level and n.predecessor in (ROOT, None) and n.display != "root"
        and not n.is_spawn_root and not n.is_summary
    ]
    if not starts:
        return None
    node = min(starts, key=lambda n: (n.created_at, n.seq))
    seen = {node.id}
    while True:
        following = next(
            (index.nodes[k] for k in index.children.get(node.id, ())
             if k in index.nodes and k not in seen),
            None,
        )
        if following is None:
            return node.id
        node = following
        seen.add(node.id)


def branch_row(node: Node, meta: dict[str, Any], *, node_times: bool = False) -> dict[str, Any]:
    """One list_branches row; ``node_times``: the times are the node's, not meta ``branches``'."""
    branches = meta.get("branches")
    entry = branches.get(node.id) if isinstance(branches, dict) else None
    if not isinstance(entry, dict):
        entry = {}
    times = {} if node_times else entry
    return {
        "head_msg_id": node.id,
        "name": entry.get("name", ""),
        "created_at": times.get("created_at", node.created_at),
        "updated_at": times.get("updated_at", node.created_at),
        "archived": bool(entry.get("archived", False)),
    }


def list_tips(index: SessionIndex, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The list_branches rows of SPEC §4, sorted by ``updated_at`` descending."""
    merged = meta.get("merged_heads")
    dropped = set(merged) if isinstance(merged, list) else set()
    tips: list[str] = []
    for node in index.nodes.values():
        if not is_tip_candidate(index, node):
            continue
        kids = index.children.get(node.id, ())
        if any(continues_conversation(index, index.nodes[k]) for k in kids if k in index.nodes):
            continue
        tips.append(node.id)
    trunk = trunk_tip(index)
    trunk_only = trunk is not None and trunk not in tips
    if trunk is not None and trunk_only:
        tips.append(trunk)
    rows = [
        branch_row(index.nodes[t], meta, node_times=trunk_only and t == trunk) for t in tips
        if t not in dropped and not t.startswith("summary_")
    ]
    rows.sort(key=lambda row: _sort_key(row["updated_at"]), reverse=True)
    return rows


def _sort_key(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def rewind_ids(index: SessionIndex, session: str, head: str, user_turn: str) -> list[str]:
    """The nodes a rewind to ``user_turn`` stamps: the head chain back to it, and sub-calls.

    Spawn roots called from those turns are separate branches with their own
    tips and are not stamped.
    """
    walked = chain(index, session, head)
    ids = [n.id for n in walked]
    if user_turn not in ids:
        raise InvalidNodeError(
            session, user_turn, f"it is not on the active chain ending at head {head!r}"
        )
    if index.nodes[user_turn].role != "user":
        raise InvalidNodeError(session, user_turn, "a rewind goes back to a user turn")
    stamped = ids[ids.index(user_turn):]
    chosen = set(stamped)
    for node in index.nodes.values():  # seq order: callers come before callees
        if node.caller in chosen and node.id not in chosen and not node.is_spawn_root:
            chosen.add(node.id)
            stamped.append(node.id)
    return stamped


def absorbed_covers(index: SessionIndex, session: str, covers_ids: list[str]) -> list[str]:
    """``covers_ids`` with each covered older summary replaced by what it covered, plus itself."""
    result: list[str] = []
    for covered in covers_ids:
        node = index.nodes.get(covered)
        if node is None:
            raise NodeNotFoundError(session, covered)
        if node.is_summary:
            older = node.metadata.get("covers_ids")
            if isinstance(older, list):
                result.extend(c for c in older if isinstance(c, str))
        result.append(covered)
    return list(dict.fromkeys(result))


def check_new_node(index: SessionIndex, session: str, node: Node, head: object) -> None:
    """Refuse ``node`` unless it may join the session (``head``: meta.json's ``head_id``).

    Checked before anything is written, so a refused append changes
    nothing: a new id, safe caller and predecessor ids, storable fields, a
    predecessor that exists, and a new top-level conversation only where a
    walk may legally end (the first conversational node, a display root, a
    spawn root, a summary).
    """
    if node.id in index.nodes:
        raise DuplicateNodeError(session, node.id)
    if node.id == ROOT:  # a node so named would make every walk through it loop (SPEC §4)
        raise InvalidNodeError(session, node.id, f"{ROOT!r} is the predecessor of a session's "
                               "first turn, not a node id; give the turn another id")
    if node.caller:
        validate_id(node.caller, "caller id", session)
    if node.predecessor is not None and node.predecessor != ROOT:
        validate_id(node.predecessor, "predecessor id", session)
    check_metadata_keys(node.metadata, session, node.id, node.role)
    for value in (node.name, node.input, node.output, node.reads, node.metadata):
        check_value(value, session, node.id)
    if not isinstance(node.name, str):
        raise InvalidNodeError(session, node.id, "name is not a string")
    exists = node.predecessor in index.nodes
    if node.predecessor not in (None, ROOT) and not exists:
        raise AppendInvariantError(session, node.id, node.predecessor)
    if node.is_top_level and node.is_conversational and not exists:
        # "First conversational node": none yet, or the head was rewound
        # back past the first turn (no head), so the conversation restarts.
        first_turn = head is None or not any(
            n.is_conversational and n.display != "root" for n in index.nodes.values()
        )
        if not (first_turn or node.display == "root" or node.is_spawn_root
                or node.is_summary):
            raise AppendInvariantError(session, node.id, node.predecessor)
