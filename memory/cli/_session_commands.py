"""``scriptorium session ...``: a look at the session DAGs under ``<state>/sessions``.

These commands only read the store (no runtime starts). What cannot be
shown (a node file that is not JSON, a predecessor loop) is named on stderr
and the command exits 1: the rest was shown.
"""
from __future__ import annotations

import os
import sys

import click
import orjson

from memory.cli._options import _guard, _head_or_note, _open_session, emit_json, state_options
from memory.cli._session_view import render_session_tree
from memory.ledger._records import MARKER_KEY
from memory.workspace._workspace_id import read_workspace_id
from store import ChainCycleError, Node, SessionCore, StoreError, list_sessions
from store.lowlevel import predecessor_cycles


@click.command("list")
@state_options
def session_list(state_dir: str, as_json: bool) -> None:
    """Every session, most recently appended first; exit 1 if a session dir cannot be listed."""
    unlisted: dict[str, StoreError] = {}
    rows = list_sessions(state_dir, unlisted)
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            click.echo(f"{row['id']}  head={row['head_id']}  {row['title']}")
    for problem in unlisted.values():
        click.echo(f"scriptorium: not listed: {problem}", err=True)
    if unlisted:
        sys.exit(1)


@click.command("branches")
@click.argument("sid")
@state_options
def session_branches(sid: str, state_dir: str, as_json: bool) -> None:
    """The tips of SID's branches (SPEC §4 list_branches); exit 1 if part of SID is unreadable."""
    core = _open_session(state_dir, sid)
    rows = _guard(core.list_branches)
    if as_json:
        emit_json(rows)
    else:
        head = _head_or_note(core)
        for row in rows:
            mark = "*" if row["head_msg_id"] == head else " "
            name = f"  {row['name']}" if row.get("name") else ""
            click.echo(f"{mark} {row['head_msg_id']}{name}")
    _exit_if_not_shown(sid, core, _guard(core.nodes))


@click.command("branch")
@click.argument("sid")
@click.option("--tip", default=None, help="Walk back from this node (default: the head).")
@state_options
def session_branch(sid: str, tip: str | None, state_dir: str, as_json: bool) -> None:
    """The messages of one branch, root to tip."""
    core = _open_session(state_dir, sid)
    messages = _guard(lambda: core.get_branch(tip))
    if as_json:
        emit_json(messages)
        return
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        click.echo(f"{message['id']} [{message['role']}] {text}")


@click.command("show")
@click.argument("sid")
@state_options
def session_show(sid: str, state_dir: str, as_json: bool) -> None:
    """Draw SID's DAG: each turn's role, a short text, and written/owed for this workspace.

    What cannot be drawn (a node file that is not JSON, a predecessor loop)
    is named on stderr, and the command exits 1.
    """
    core = _open_session(state_dir, sid)
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    nodes = _guard(core.nodes)
    head = _head_or_note(core)
    lines = render_session_tree(nodes, head=head, workspace_id=workspace)
    if as_json:
        emit_json({
            "session": sid,
            "head": head,
            "workspace": workspace,
            "nodes": [
                {"id": n.id, "role": n.role, "predecessor": n.predecessor, "caller": n.caller,
                 "written": workspace is not None
                 and n.metadata.get(MARKER_KEY) == workspace}
                for n in nodes
            ],
        })
    else:
        for line in lines:
            click.echo(line)
    _exit_if_not_shown(sid, core, nodes)


def _exit_if_not_shown(sid: str, core: SessionCore, nodes: list[Node]) -> None:
    """A look at a session names on stderr each part it could not show, then exits 1.

    Those are the node files the store skipped (not JSON) and the nodes on a
    predecessor loop (no root reaches them): the rest was shown, so this is
    "a problem found" (1), not "the state could not be read" (3).
    """
    problems = [str(problem) for problem in core.problems]
    problems += [str(ChainCycleError(sid, loop[0], loop[-1], tuple(loop)))
                 for loop in predecessor_cycles(nodes)]
    for problem in problems:
        click.echo(f"scriptorium: warning: not shown: {problem}", err=True)
    if problems:
        sys.exit(1)

