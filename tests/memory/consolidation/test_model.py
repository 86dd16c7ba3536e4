"""The model consolidator against the loopback model server: its proposals checked like a write."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory._errors import ConsolidationRefusedError
from memory.consolidation._model import ProposalError, apply_proposals, parse_proposals
from memory.consolidation._model_pass import ModelConsolidator, consolidate_with_model
from memory.consolidation._pass import read_history
from memory.workspace._edits import TopicEdit
from memory.workspace._topics import parse_topic
from memory.workspace._transaction import Transactions
from memory.writers.model._retry import RetryPolicy
from memory.writers.model._settings import ModelSettings
from memory.writers.model._transport import Endpoint
from memory.writers.model._wire import PROVIDERS
from supervisors import Backoff
from tests.fixture import copy_fixture
from tests.model_server import ScriptedModel

ARCHIVE = {"openprogram/demo/u1": True, "openprogram/demo/a2": True}
NOW = 1_800_000_000.0


def _workspace(tmp_path: Path) -> Path:
    """The fixture's memory plus one fact told twice, in two files (each its own source)."""
    memory = copy_fixture(tmp_path / "memory", "memory")
    tx = Transactions(str(memory), archived=ARCHIVE.get)
    tx.commit([TopicEdit(f"topics/{name}.md", f"# {name}\n\n{text}[^e1]\n\n"
                         f"[^e1]: Time: `2025-05-01`; Sources: {source}\n")
               for name, text, source in [("a", "The cat is called Tom.", "openprogram/demo/u1"),
                                          ("b", "the cat is called tom.", "openprogram/demo/a2")]],
              base_revision=tx.revision(), batch_sources=set(ARCHIVE))
    return memory


def _topics(memory: Path) -> dict[str, bytes]:
    return {p.relative_to(memory).as_posix(): p.read_bytes()
            for p in sorted((memory / "topics").rglob("*.md"))}


def _endpoint(server: ScriptedModel, provider: str) -> Endpoint:
    return Endpoint(ModelSettings(
        base_url=server.base_url, model="scripted-1", provider=provider, total_timeout=5.0,
        retry=RetryPolicy(attempts=2, backoff=Backoff(initial=0.01, maximum=0.05))), env={})


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_models_merge_is_installed_keeping_every_id_and_source(
    tmp_path: Path, provider: str,
) -> None:
    memory = _workspace(tmp_path)
    with ScriptedModel(default="consolidate").running() as server:
        async with _endpoint(server, provider) as endpoint:
            prepared = await consolidate_with_model(
                str(memory), ModelConsolidator(endpoint), scope="local", now=NOW)
    assert [a["kind"] for a in prepared.record["actions"]] == ["merge"]
    assert sorted(_topics(memory)) == ["topics/a.md", "topics/people/owner.md"]
    (paragraph,) = parse_topic((memory / "topics/a.md").read_text(), "topics/a.md").paragraphs
    assert paragraph.body.startswith("The cat is called tom.[^")
    assert len(paragraph.ids) == 2 and len(paragraph.citations) == 2
    (record,) = read_history(str(memory))
    assert record["actions"][0]["reason"] == "proposed by the model"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_model_that_proposes_to_drop_a_fact_is_refused_whole(
    tmp_path: Path, provider: str,
) -> None:
    memory = _workspace(tmp_path)
    before = _topics(memory)
    with ScriptedModel(default="consolidate_drop").running() as server:
        async with _endpoint(server, provider) as endpoint:
            with pytest.raises(ConsolidationRefusedError, match="no longer be cited"):
                await consolidate_with_model(str(memory), ModelConsolidator(endpoint),
                                             scope="local", now=NOW)
    assert _topics(memory) == before and read_history(str(memory)) == []


async def test_an_unreadable_answer_refuses_the_pass(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    before = _topics(memory)
    with ScriptedModel(default="malformed").running() as server:
        async with _endpoint(server, "openai") as endpoint:
            with pytest.raises(ConsolidationRefusedError, match="cannot be applied"):
                await consolidate_with_model(str(memory), ModelConsolidator(endpoint),
                                             scope="local", now=NOW)
    assert _topics(memory) == before


@pytest.mark.parametrize(("answer", "why"), [
    ('{"edits": [{"action": "delete_all"}]}', "no action"),
    ('{"edits": [{"action": "merge", "blocks": ["37913bbd", "nope0000"], "text": "x"}]}',
     "not a paragraph shown"),
    ('{"edits": [{"action": "rewrite", "block": "37913bbd", "text": "new[^e-1] ^abc"}]}',
     "without citations"),
    ('{"edits": [{"action": "merge", "blocks": ["37913bbd"], "text": "x"}]}', "at least two"),
])
def test_proposals_are_read_strictly(tmp_path: Path, answer: str, why: str) -> None:
    memory = _workspace(tmp_path)
    topics = {p: parse_topic(t.decode(), p) for p, t in _topics(memory).items()}
    with pytest.raises(ProposalError, match=why):
        apply_proposals(topics, parse_proposals(answer))


def test_a_rewrite_keeps_the_citations_and_a_reasonless_removal_is_caught(
    tmp_path: Path,
) -> None:
    from memory.consolidation._plan import losses

    memory = _workspace(tmp_path)
    topics = {p: parse_topic(t.decode(), p) for p, t in _topics(memory).items()}
    plan = apply_proposals(topics, parse_proposals(
        '{"edits": [{"action": "rewrite", "block": "37913bbd", "text": "Biscuits, too."}]}'))
    (edited,) = plan.topics.values()
    assert edited.paragraphs[0].body == "Biscuits, too.[^e-9574e39236]"
    assert losses(topics, plan) == []
    dropped = apply_proposals(topics, parse_proposals(
        '{"edits": [{"action": "remove", "block": "3216f7d0", "reason": " "}]}'))
    assert any("without a recorded reason" in p for p in losses(topics, dropped))
