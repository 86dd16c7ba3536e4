"""The ``scriptorium`` command line (SPEC §8).

Every command takes ``--state DIR`` (default ``$SCRIPTORIUM_STATE`` or
``~/.scriptorium``) and ``--json``, which prints exactly one JSON document on
stdout and nothing else there. Errors go to stderr with a non-zero exit, and
name the session, node or file.

click is the framework (see docs/decisions.md): it parses, documents and
tests commands, and draws the progress bars of the long commands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import orjson

from memory._ledger import owed_tokens, records_from_branch, unwritten_turns
from memory._records import MARKER_KEY
from memory._session_view import render_session_tree
from memory._simulate_cli import simulate
from memory._workspace_id import read_workspace_id
from store import SessionCore, StoreError, list_sessions

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _default_state() -> str:
    return os.environ.get("SCRIPTORIUM_STATE") or os.path.join(
        os.path.expanduser("~"), ".scriptorium"
    )


def state_options(command: F) -> F:
    """``--state DIR`` and ``--json``, shared by every command."""
    command = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
    )(command)
    command = click.option(
        "--state",
        "state_dir",
        type=click.Path(file_okay=False, path_type=str),
        default=_default_state,
        show_default="$SCRIPTORIUM_STATE or ~/.scriptorium",
        help="The state directory holding sessions/ and memory/.",
    )(command)
    return command


def emit_json(document: object) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def _open_session(state_dir: str, session: str) -> SessionCore:
    try:
        return SessionCore.open(state_dir, session)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
@click.version_option(package_name="scriptorium")
def main() -> None:
    """Scriptorium: the long-term memory runtime of an agent whose conversations are DAGs."""


# -- session -----------------------------------------------------------------------


@main.group()
def session() -> None:
    """Inspect the session DAGs under <state>/sessions."""


@session.command("list")
@state_options
def session_list(state_dir: str, as_json: bool) -> None:
    """Every session, most recently appended first."""
    rows = list_sessions(state_dir)
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        click.echo(f"{row['id']}  head={row['head_id']}  {row['title']}")


@session.command("branches")
@click.argument("sid")
@state_options
def session_branches(sid: str, state_dir: str, as_json: bool) -> None:
    """The tips of SID's branches (SPEC §4 list_branches)."""
    core = _open_session(state_dir, sid)
    rows = _guard(core.list_branches)
    if as_json:
        emit_json(rows)
        return
    head = core.head
    for row in rows:
        mark = "*" if row["head_msg_id"] == head else " "
        name = f"  {row['name']}" if row.get("name") else ""
        click.echo(f"{mark} {row['head_msg_id']}{name}")


@session.command("branch")
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


@session.command("show")
@click.argument("sid")
@state_options
def session_show(sid: str, state_dir: str, as_json: bool) -> None:
    """Draw SID's DAG: each turn's role, a short text, and written/owed for this workspace."""
    core = _open_session(state_dir, sid)
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    nodes = _guard(core.nodes)
    if as_json:
        emit_json({
            "session": sid,
            "head": core.head,
            "workspace": workspace,
            "nodes": [
                {"id": n.id, "role": n.role, "predecessor": n.predecessor, "caller": n.caller,
                 "written": workspace is not None
                 and n.metadata.get(MARKER_KEY) == workspace}
                for n in nodes
            ],
        })
        return
    for line in render_session_tree(nodes, head=core.head, workspace_id=workspace):
        click.echo(line)


# -- memory ------------------------------------------------------------------------


@main.group()
def memory() -> None:
    """The memory ledger: what each branch still owes."""


@memory.command("pending")
@click.argument("sid")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@state_options
def memory_pending(sid: str, tip: str | None, state_dir: str, as_json: bool) -> None:
    """The owed turns of a branch: its contiguous tail not marked by this workspace."""
    core = _open_session(state_dir, sid)
    branch = _guard(lambda: core.get_branch(tip))
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    records = records_from_branch(sid, branch)
    owed = unwritten_turns(records, workspace) if workspace is not None else records
    document = {
        "session": sid,
        "tip": tip if tip is not None else core.head,
        "pending": [record.message_id for record in owed],
        "tokens": owed_tokens(owed),
    }
    if as_json:
        emit_json(document)
        return
    click.echo(f"{len(owed)} owed turns, {document['tokens']} tokens")
    for record in owed:
        click.echo(f"  {record.message_id} [{record.role}] {_short(record.content)}")


T = TypeVar("T")


def _guard(read: Callable[[], T]) -> T:
    """Turn a store error into a clean CLI error (message on stderr, exit 1)."""
    try:
        return read()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _short(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


main.add_command(simulate)
