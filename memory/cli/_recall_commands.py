"""``scriptorium memory search|context|reindex``: recall from the command line (issue 13).

Each starts the runtime on the state and asks it (so the index is synced
first, and a read-only state gets a private index in memory); the ranking
and packing rules are ``memory.recall``'s.
"""
from __future__ import annotations

import sys

import click

from memory.cli._cli_errors import EXIT_PROBLEMS
from memory.cli._options import _with_runtime, emit_json, state_options
from memory.cli._progress import QUIET_OPTION, ProgressView
from memory.recall import INDEX_PATH, MAX_QUERY_CHARS, Context, Hit, SyncReport
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig
from store.lowlevel import validate_id


def _recall_target(sid: str | None, tip: str | None, query: str) -> None:
    if len(query) > MAX_QUERY_CHARS:  # recall bounds it; say so rather than drop it silently
        click.echo(f"scriptorium: warning: the query is {len(query):,} characters; only its "
                   f"first {MAX_QUERY_CHARS:,} are searched", err=True)
    if tip is not None and sid is None:
        raise click.UsageError("--tip needs --session: a tip names a node of one session")
    if sid is not None:
        validate_id(sid, "session id")


@click.command("search")
@click.argument("query")
@click.option("--k", "k", type=click.IntRange(1, 1000), default=8, show_default=True,
              help="How many hits.")
@click.option("--session", "sid", default=None, help="Rank this session's branch first.")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@click.option("--include-pending", is_flag=True, help="Also sources of pending trust (labelled).")
@click.option("--include-owed", is_flag=True,
              help="Also up to --k turns of the sessions not yet written to memory (labelled).")
@state_options
def memory_search(query: str, k: int, sid: str | None, tip: str | None, include_pending: bool,
                  include_owed: bool, state_dir: str, as_json: bool) -> None:
    """The best units of memory for QUERY: topic paragraphs and archived turns.

    Each line starts with the hit's score relative to the best hit (1.000):
    a raw score (BM25 times the ranking rules, ``"score"`` in --json) only
    compares hits of one query, and on a small memory it is near zero for
    every hit (BM25 gives little weight to a word most units hold).
    """
    _recall_target(sid, tip, query)

    async def body(rt: MemoryRuntime) -> list[Hit]:
        return await rt.recall(query, k=k, session=sid, tip=tip,
                               include_pending=include_pending, include_owed=include_owed)

    hits = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    # Owed turns are ranked apart (memory.recall._owed): relative to the best of their own.
    best = {owed: max((h.score for h in hits if (h.kind == "owed") == owed), default=0.0)
            for owed in (False, True)}

    def relative(hit: Hit) -> float:
        top = best[hit.kind == "owed"]
        return hit.score / top if top > 0 else 0.0

    if as_json:
        emit_json([{**hit.as_json(), "relative": round(relative(hit), 6)} for hit in hits])
        return
    for hit in hits:
        where = (f"{hit.file} ^{hit.block_id}" if hit.kind == "topic"
                 else f"{hit.session}/{hit.node_id} {hit.speaker}"
                 + (" (pending)" if hit.trust != "trusted" else "")
                 + (" (owed: not yet in memory)" if hit.kind == "owed" else ""))
        click.echo(f"{relative(hit):5.3f}  [{hit.time}] {where}: "
                   f"{' '.join(hit.text.split())[:200]}")
    if not hits:
        click.echo("no match")


@click.command("context")
@click.argument("query")
@click.option("--budget", type=click.IntRange(1, 1_000_000), default=500, show_default=True,
              help="Most tokens the block may take (the ledger's counter).")
@click.option("--session", "sid", default=None, help="Rank this session's branch first.")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@click.option("--include-owed", is_flag=True,
              help="Also turns not yet written to memory, in what the budget leaves (labelled).")
@state_options
def memory_context(query: str, budget: int, sid: str | None, tip: str | None,
                   include_owed: bool, state_dir: str, as_json: bool) -> None:
    """A block for a prompt: the memory QUERY needs, within --budget tokens."""
    _recall_target(sid, tip, query)

    async def body(rt: MemoryRuntime) -> Context:
        return await rt.context(query, budget_tokens=budget, session=sid, tip=tip,
                                include_owed=include_owed)

    context = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    if as_json:
        emit_json(context.as_json())
    else:
        click.echo(context.text if context.text else "(nothing found)")


@click.command("reindex")
@QUIET_OPTION
@state_options
def memory_reindex(quiet: bool, state_dir: str, as_json: bool) -> None:
    """Rebuild the recall index (memory/.scriptorium/recall.sqlite) from the files.

    On a state this process cannot write, the files are indexed in memory
    (what search does there), the file is left as it is, and the exit is 1.
    """

    async def body(rt: MemoryRuntime) -> SyncReport:
        with ProgressView("reindexing memory", "files", quiet=quiet) as progress:
            return await rt.reindex(progress)

    report = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    if as_json:
        emit_json({"units": report.added, "files": report.files, "revision": report.revision,
                   "private": report.private})
    else:
        # read-only: nothing rebuilt on disk, and stdout alone must not claim it was
        where = " in memory only (recall.sqlite not rebuilt)" if report.private else ""
        click.echo(f"indexed {report.added} unit(s) from {report.files} file(s){where}")
    if report.private:  # read-only state: searches still work, each on its own private index
        click.echo(f"scriptorium: {state_dir}/memory/{INDEX_PATH} was not rebuilt: the state "
                   "cannot be written here (read-only); search and context build a private "
                   "index in memory instead", err=True)
        sys.exit(EXIT_PROBLEMS)

