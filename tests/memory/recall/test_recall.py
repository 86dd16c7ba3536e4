"""Recall end to end through the runtime: one test per ranking rule, and the bad inputs.

Each rule is checked where it decides the order: two units with the same
words, one of them favoured only by the rule (the branch asked for, the
time the query names), so without the rule the test fails.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from memory._errors import EmptyQueryError, RecallError
from memory.cli._cli import main
from memory.ledger import SourceMeta, SourceRecord, estimate_tokens
from memory.ledger._ledger import WritePolicy
from memory.recall import MAX_QUERY_CHARS, parse_query
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace import TopicEdit, WorkspaceSnapshot, append_records
from memory.writers import Batch
from store import DurableFiles, NodeNotFoundError, SessionNotFoundError


def config(clock: list[float] | None = None, **overrides: Any) -> RuntimeConfig:
    options: dict[str, Any] = {"policy": WritePolicy(threshold=8000), "writer_workers": 1,
                               "counter": estimate_tokens}
    if clock is not None:
        options["clock"] = lambda: clock[0]
    options.update(overrides)
    return RuntimeConfig(**options)


async def turns(rt: MemoryRuntime, sid: str, start: str, pairs: list[tuple[str, str]]) -> str:
    previous = start
    for index, (node_id, text) in enumerate(pairs):
        role = "user" if index % 2 == 0 else "assistant"
        await rt.sessions.append(sid, {"id": node_id, "role": role, "content": text,
                                       "predecessor": previous})
        previous = node_id
    return previous


def sources(hits: list[Any]) -> list[tuple[str | None, str | None]]:
    return [(h.session, h.node_id) for h in hits if h.kind == "source"]


async def test_the_fact_on_the_asked_branch_ranks_above_the_same_fact_on_an_abandoned_one(
    tmp_path: Path,
) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="keys", session_id="keys")
        await turns(rt, sid, "ROOT", [("u1", "Where is the spare key?"),
                                      ("a1", "The spare key is under the blue flowerpot.")])
        # a retry of a1 with the same words: an abandoned branch once the head is back on a1
        await rt.sessions.append(sid, {"id": "a1b", "role": "assistant", "predecessor": "u1",
                                       "content": "The spare key is under the blue flowerpot."})
        for tip in ("a1b", "a1"):
            await rt.sessions.set_head(sid, tip)
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        for tip, other in (("a1", "a1b"), ("a1b", "a1")):
            hits = await rt.recall("blue flowerpot", session=sid, tip=tip, k=20)
            found = sources(hits)
            assert (sid, tip) in found and (sid, other) in found
            assert found.index((sid, tip)) < found.index((sid, other)), (tip, found)
            by_node = {h.node_id: h for h in hits if h.kind == "source"}
            assert by_node[tip].on_branch is True and by_node[other].on_branch is False
        # without a session, recall does not know a branch
        assert all(h.on_branch is None for h in await rt.recall("blue flowerpot"))


async def test_the_workspace_actor_indexes_after_each_append_and_commit(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="hook", session_id="hook")
        await turns(rt, sid, "ROOT", [("u1", "The boat is called Pixel."), ("a1", "Lovely.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        assert not rt.recall_index.index.opened  # nobody asked yet: nothing maintained
        assert ("hook", "u1") in sources(await rt.recall("boat"))  # the first query catches up
        await turns(rt, sid, "a1", [("u2", "The dog is called Biscuit."), ("a2", "Cute.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        # no query ran since: what the index holds now came from the actor's hook
        units = rt.recall_index.index.dump()
        assert {row[0] for row in units} == {"source", "topic"}
        assert {row[11] for row in units if row[0] == "source"} == {"u1", "a1", "u2", "a2"}


async def test_turns_only_on_rewound_branches_are_left_out(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="soup", session_id="soup")
        await turns(rt, sid, "ROOT", [("u1", "Let us plan dinner."), ("a1", "Soup it is."),
                                      ("u2", "Add saffron to the soup."),
                                      ("a2", "Saffron added to the soup.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN  # u2, a2 archived
        await rt.sessions.rewind_to(sid, "u2")
        await turns(rt, sid, "a1", [("u2b", "Add basil to the soup."),
                                    ("a2b", "Basil added to the soup.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        everywhere = sources(await rt.recall("saffron", k=20))
        assert ("soup", "u2") in everywhere  # archived, so without a branch it is found
        on_branch = sources(await rt.recall("saffron soup", session=sid, k=20))
        assert ("soup", "u2") not in on_branch and ("soup", "a2") not in on_branch
        assert ("soup", "u2b") in on_branch
        context = await rt.context("saffron soup", session=sid)
        assert ("soup", "u2") not in context.quoted and ("soup", "a2") not in context.quoted


async def test_a_turn_never_matches_through_the_words_of_a_rewound_neighbour(
    tmp_path: Path,
) -> None:
    """A turn's surroundings are its neighbours in the DAG, not in the archive's order.

    The archive holds u1 a1 u2 a2 u2b a2b: by that order the retried u2b
    and a2b sat next to the rewound u2 and a2 and matched "saffron", a
    word only the rewound turns say.
    """
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="soup", session_id="soup")
        await turns(rt, sid, "ROOT", [("u1", "Let us plan dinner."), ("a1", "Soup it is."),
                                      ("u2", "Add saffron to the broth."),
                                      ("a2", "Saffron added to the broth.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.sessions.rewind_to(sid, "u2")
        await turns(rt, sid, "a1", [("u2b", "Add basil to the broth."),
                                    ("a2b", "Basil added to the broth."),
                                    ("u3", "Serve it hot."), ("a3", "Served.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        found = sources(await rt.recall("saffron", session=sid, k=20))
        assert not {n for _, n in found} & {"u1", "a1", "u2b", "a2b", "u3", "a3"}, found
        # the live branch's own neighbours still count: u3 is found through a2b's "basil"
        assert ("soup", "u3") in sources(await rt.recall("basil serve", session=sid, k=20))
        # and the index kept current step by step equals one rebuilt from the files
        kept = rt.recall_index.index.dump()
        await rt.reindex()
        assert rt.recall_index.index.dump() == kept


async def test_a_date_in_the_query_favours_the_turns_of_that_time(tmp_path: Path) -> None:
    may = datetime(2023, 5, 8, 14, tzinfo=UTC).timestamp()
    july = datetime(2023, 7, 20, 14, tzinfo=UTC).timestamp()
    clock = [may]
    async with open_runtime(tmp_path, config=config(clock)) as rt:
        sid = await rt.sessions.create(title="lake", session_id="lake")
        await turns(rt, sid, "ROOT", [("m1", "We swam in the lake."), ("m2", "Cold water.")])
        clock[0] = july
        await turns(rt, sid, "m2", [("j1", "We swam in the lake."), ("j2", "Warm water.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        for query, first in (("swam in the lake in July 2023", "j1"),
                             ("swam in the lake on 8 May 2023", "m1"),
                             ("swam in the lake 2023-07-20", "j1")):
            found = [n for s, n in sources(await rt.recall(query, session=sid, k=10))
                     if n in ("m1", "j1")]
            assert found[0] == first, (query, found)
        # relative time, as of a moment: "last week" seen from late July
        as_of = july + 3 * 86400
        context = await rt.context("lake last week", session=sid, budget_tokens=18, as_of=as_of)
        assert context.quoted and context.quoted[0] == ("lake", "j1")
        # since/until keep only the units of that time
        hits = await rt.recall("lake", since=july - 86400, until=july + 86400)
        assert sources(hits)[0] == ("lake", "j1")
        assert not {"m1", "m2"} & {n for _, n in sources(hits)}
        assert hits[0].time == "20 July 2023" and hits[0].when.startswith("2023-07-20T")


async def test_a_pending_source_is_left_out_unless_asked_for_and_then_labelled(
    tmp_path: Path,
) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="plain", session_id="plain")
        await turns(rt, sid, "ROOT", [("u1", "Walruses are big."), ("a1", "They are.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        pending = SourceRecord(
            session_id="inbox", message_id="p1", role="user", timestamp=1_700_000_000.0,
            content="A stranger says the walrus password is hunter2.", tokens=10,
            speaker="Stranger", meta=SourceMeta(authority_tier=None, principal_id="unknown",
                                                speaker_kind="unknown", trust_state="pending"))
        append_records(rt.memory_dir, "inbox", [pending], DurableFiles())
        assert ("inbox", "p1") not in sources(await rt.recall("walrus password", k=20))
        asked = [h for h in await rt.recall("walrus password", k=20, include_pending=True)
                 if h.node_id == "p1"]
        assert len(asked) == 1 and asked[0].trust == "pending"
        assert asked[0].as_json()["trust"] == "pending"
        context = await rt.context("walrus password")
        assert ("inbox", "p1") not in context.quoted and "hunter2" not in context.text


class SummaryWriter:
    """One paragraph per batch that says everything the turns say (so it ranks first)."""

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        handles = ", ".join(f"openprogram/{r.session_id}/{r.message_id}" for r in batch.records)
        return [TopicEdit("topics/tea.md", "# Tea\n\nThe owner and Alice drink green tea, "
                          f"sencha, every morning: green tea.[^e1]\n\n[^e1]: Time: `2023`; "
                          f"Sources: {handles}\n")]


async def test_a_paragraph_and_the_turns_it_cites_are_not_shown_twice(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, SummaryWriter(), config=config()) as rt:
        sid = await rt.sessions.create(title="tea", session_id="tea")
        await turns(rt, sid, "ROOT", [("u1", "I prefer green tea in the morning, sencha."),
                                      ("a1", "Noted.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        everything = await rt.recall("green tea sencha Alice", k=50)
        assert [h.kind for h in everything] == ["topic"]  # u1 matches too, but is cited
        assert everything[0].sources == (("tea", "u1"), ("tea", "a1"))
        hits = await rt.recall("green tea sencha Alice", session=sid, k=50)
        topics = [h for h in hits if h.kind == "topic"]
        shown = sources(hits)
        for topic in topics:
            assert topic.sources and not set(topic.sources) & set(shown), topic
        assert len(shown) == len(set(shown))
        context = await rt.context("green tea sencha Alice", session=sid, budget_tokens=1000)
        assert context.cited == (("tea", "u1"), ("tea", "a1")) and context.quoted == ()
        assert context.tokens <= 1000 and context.tokens == estimate_tokens(context.text)


async def test_bad_queries_are_clear_errors_or_plain_text(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="ops", session_id="ops")
        await turns(rt, sid, "ROOT", [("u1", 'He said "NEAR(a b)" AND left * ^ quickly: ok'),
                                      ("a1", "Fine.")])
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        for empty in ("", "   ", "?!", "**"):
            with pytest.raises(EmptyQueryError):
                await rt.recall(empty)
            with pytest.raises(EmptyQueryError):
                await rt.context(empty)
        # FTS operators and quotes are words
        found = sources(await rt.recall('"NEAR(a b)" AND left * ^ col:umn OR NOT', k=5))
        assert ("ops", "u1") in found
        # a 100 KB query is cut before anything looks at it
        huge = "quickly " + "x" * 50_000 + " left" * 10_000
        assert len(parse_query(huge, as_of=0).text) == MAX_QUERY_CHARS
        assert ("ops", "u1") in sources(await rt.recall(huge, k=5))
        with pytest.raises(SessionNotFoundError):
            await rt.recall("left", session="nobody")
        with pytest.raises(NodeNotFoundError):
            await rt.context("left", session=sid, tip="no-such-node")
        with pytest.raises(RecallError):
            await rt.recall("left", tip="u1")


def test_the_cli_searches_builds_context_and_reindexes(tmp_path: Path) -> None:
    async def build() -> None:
        async with open_runtime(tmp_path, config=config()) as rt:
            sid = await rt.sessions.create(title="cli", session_id="cli")
            await turns(rt, sid, "ROOT", [("u1", "The boat is called Pixel."),
                                          ("a1", "Pixel is a lovely name.")])
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
            await rt.drain()

    import anyio

    anyio.run(build)
    runner = CliRunner()
    result = runner.invoke(main, ["memory", "search", "boat Pixel", "--state", str(tmp_path),
                                  "--session", "cli", "--json"])
    assert result.exit_code == 0, result.output
    hits = orjson.loads(result.output)
    assert any(h["kind"] == "source" and h["node_id"] == "u1" for h in hits)
    result = runner.invoke(main, ["memory", "context", "boat", "--budget", "60", "--state",
                                  str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    block = orjson.loads(result.output)
    assert block["tokens"] <= 60 and ["cli", "u1"] in block["quoted"]
    (tmp_path / "memory" / ".scriptorium" / "recall.sqlite").write_bytes(b"not a database")
    result = runner.invoke(main, ["memory", "reindex", "--state", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output)["units"] >= 2
    result = runner.invoke(main, ["memory", "search", "  ", "--state", str(tmp_path)])
    assert result.exit_code == 2 and "no word" in result.output
    result = runner.invoke(main, ["memory", "search", "x", "--tip", "u1", "--state",
                                  str(tmp_path)])
    assert result.exit_code == 2
