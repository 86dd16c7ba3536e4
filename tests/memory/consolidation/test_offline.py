"""The offline consolidator: exact results on known topics, and never a lost fact on any."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.consolidation._offline import consolidate_offline
from memory.consolidation._plan import Plan, losses
from memory.workspace._topics import (
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from tests.memory.workspace._strategies import topics as topic_strategy

V2 = "sources/openprogram/_v2/demo.md#source-"


def _topic(*paragraphs: tuple[str, str, str, str], heading: str = "T", depth: int = 1) -> Topic:
    """Paragraphs of (text, block id, when, anchor hex), each citing one footnote."""
    up = "../" * depth
    blocks: list[Heading | Paragraph] = [Heading(1, heading)]
    footnotes: dict[str, Footnote] = {}
    for text, block_id, when, anchor in paragraphs:
        label = f"e-{anchor[:10]}"
        blocks.append(Paragraph(f"{text}[^{label}]", (block_id,)))
        footnotes[label] = Footnote(label, when, (SourceLink("s", f"{up}{V2}{anchor}"),))
    return Topic(tuple(blocks), footnotes)


A1 = "a" * 16
A2 = "b" * 16
A3 = "c" * 16
A4 = "d" * 16


def test_the_same_fact_in_two_files_becomes_one_paragraph_citing_both() -> None:
    topics = {
        "topics/a.md": _topic(("User (1 May 2025): My usual drink is green tea.", "0000000a", "2025-05-01",
                               A1)),
        "topics/sub/b.md": _topic(("User (2 May 2025): my usual drink is GREEN tea!", "0000000b",
                                   "2025-05-01", A2), depth=2),
    }
    plan = consolidate_offline(topics)
    assert [(a.kind, a.block, a.absorbed) for a in plan.actions] == [
        ("merge", "0000000a", ("0000000b",))]
    assert render_topic(plan.topics["topics/a.md"]) == (
        "# T\n\n"
        "User (1 May 2025): My usual drink is green tea.[^e-aaaaaaaaaa][^e-bbbbbbbbbb] ^0000000a ^0000000b\n\n"
        f"[^e-aaaaaaaaaa]: Time: `2025-05-01`; Sources: [s](../{V2}{A1})\n\n"
        f"[^e-bbbbbbbbbb]: Time: `2025-05-01`; Sources: [s](../{V2}{A2})\n")
    assert plan.topics["topics/sub/b.md"].paragraphs == ()  # emptied: the commit prunes it
    assert losses(topics, plan) == []


def test_a_newer_value_supersedes_the_older_which_stays_cited_as_history() -> None:
    topics = {"topics/a.md": _topic(
        ("User (1 May 2025): My usual drink is green tea.", "0000000a", "2025-05-01", A1),
        ("The office is in Berlin.", "0000000c", "undated", A3),
        ("User (3 June 2025): My usual drink is coffee.", "0000000b", "2025-06-03", A2),
    )}
    plan = consolidate_offline(topics)
    assert [(a.kind, a.block, a.absorbed) for a in plan.actions] == [
        ("supersede", "0000000b", ("0000000a",))]
    assert [p.body for p in plan.topics["topics/a.md"].paragraphs] == [
        ("User (3 June 2025): My usual drink is coffee.[^e-bbbbbbbbbb]\n"
         "Previously (2025-05-01): User (1 May 2025): My usual drink is green tea.[^e-aaaaaaaaaa]"),
        "The office is in Berlin.[^e-cccccccccc]",
    ]
    assert losses(topics, plan) == []


def test_undated_or_overlapping_dates_never_supersede() -> None:
    for older, newer in [("undated", "2025-06-03"), ("2025", "2025-06-03")]:
        topics = {"topics/a.md": _topic(("My usual drink is green tea.", "0000000a", older, A1),
                                        ("My usual drink is coffee.", "0000000b", newer, A2))}
        assert consolidate_offline(topics).actions == ()


def test_facts_about_one_subject_are_folded_together_under_their_heading() -> None:
    topics = {"topics/a.md": _topic(
        ("Alice works at the bakery.", "0000000a", "2025-01-01", A1),
        ("Bob plays chess on Sundays.", "0000000b", "2025-01-01", A2),
        ("Alice lives in Lyon now.", "0000000c", "2025-01-01", A3),
    )}
    plan = consolidate_offline(topics)
    assert [a.kind for a in plan.actions] == ["fold"]
    assert [p.ids[0] for p in plan.topics["topics/a.md"].paragraphs] == [
        "0000000a", "0000000c", "0000000b"]


def test_footnotes_saying_the_same_thing_are_shared_and_handle_labels_shortened() -> None:
    footnote = Footnote("e-0000000001", "2025-05-01", (
        SourceLink("openprogram/demo/D1-3", f"../{V2}{A1}"),))
    twin = Footnote("e-0000000002", "2025-05-01", footnote.sources)
    topics = {"topics/a.md": Topic((
        Heading(1, "T"),
        Paragraph("Gina opened a store.[^e-0000000001]", ("0000000a",)),
        Paragraph("The store sells clothes.[^e-0000000002]", ("0000000b",)),
    ), {"e-0000000001": footnote, "e-0000000002": twin})}
    plan = consolidate_offline(topics)
    assert [a.kind for a in plan.actions] == ["compact"]
    assert render_topic(plan.topics["topics/a.md"]) == (
        "# T\n\nGina opened a store.[^e-0000000001] ^0000000a\n\n"
        f"[^e-0000000001]: Time: `2025-05-01`; Sources: [D1-3](../{V2}{A1})\n\n"
        "The store sells clothes.[^e-0000000001] ^0000000b\n")
    assert losses(topics, plan) == []


def test_a_second_pass_finds_nothing_left_to_do() -> None:
    topics = {"topics/a.md": _topic(
        ("User (1 May 2025): My usual drink is green tea.", "0000000a", "2025-05-01", A1),
        ("User (3 June 2025): My usual drink is coffee.", "0000000b", "2025-06-03", A2),
        ("User (4 June 2025): My usual drink is coffee.", "0000000c", "2025-06-04", A4))}
    first = consolidate_offline(topics)
    again = consolidate_offline({**topics, **first.topics})
    assert again.actions == ()


# -- properties over generated topics -------------------------------------------------


@st.composite
def workspaces(draw: st.DrawFn) -> dict[str, Topic]:
    """Two or three generated topic files, plus copies of some paragraphs in other files."""
    paths = ["topics/a.md", "topics/b.md", "topics/deep/c.md"][:draw(st.integers(2, 3))]
    files = {path: draw(topic_strategy()) for path in paths}
    ids = [i for topic in files.values() for i in topic.block_ids()]
    if len(ids) != len(set(ids)):  # ids are drawn per file; keep workspaces where they differ
        files = {paths[0]: files[paths[0]]}
    taken = set(ids)
    for _ in range(draw(st.integers(0, 4))):
        source = draw(st.sampled_from(sorted(files)))
        if not files[source].paragraphs:
            continue
        paragraph = draw(st.sampled_from(files[source].paragraphs))
        target = draw(st.sampled_from(sorted(files)))
        new_id = next(f"{n:08x}" for n in range(10**6) if f"{n:08x}" not in taken)
        taken.add(new_id)
        copied = {label: files[source].footnotes[label] for label in paragraph.citations}
        if source != target and posixpath_dir(source) != posixpath_dir(target):
            continue  # the strategy's links are relative; copies stay in one directory
        topic = files[target]
        clash = any(label in topic.footnotes and topic.footnotes[label] != footnote
                    for label, footnote in copied.items())
        if clash:
            continue
        files[target] = Topic((*topic.blocks, Paragraph(paragraph.body, (new_id,))),
                              {**topic.footnotes, **copied})
    return files


def posixpath_dir(path: str) -> str:
    return path.rpartition("/")[0]


def _check(topics: Mapping[str, Topic], plan: Plan) -> None:
    assert losses(topics, plan) == []
    for path, topic in plan.topics.items():
        if topic.paragraphs:  # what the commit installs parses strictly
            assert parse_topic(render_topic(topic), path) == topic


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workspaces())
def test_after_any_pass_every_cited_source_and_block_id_still_resolves(
    topics: dict[str, Topic],
) -> None:
    plan = consolidate_offline(topics)
    _check(topics, plan)
    assert consolidate_offline(topics) == plan  # deterministic


def _drops_one_paragraph(topics: Mapping[str, Topic]) -> Plan:
    """A planted consolidator: the offline pass, then the first paragraph silently dropped."""
    plan = consolidate_offline(topics)
    after = {**topics, **plan.topics}
    for path in sorted(after):
        topic = after[path]
        if topic.paragraphs:
            victim = topic.paragraphs[0]
            kept = tuple(b for b in topic.blocks if b is not victim)
            return Plan({**plan.topics, path: Topic(kept, topic.footnotes)}, plan.actions)
    return plan


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workspaces())
def test_a_consolidator_that_drops_a_paragraph_is_caught(topics: dict[str, Topic]) -> None:
    plan = _drops_one_paragraph(topics)
    if any(t.paragraphs for t in topics.values()):
        problems = losses(topics, plan)
        assert any("would no longer resolve" in p for p in problems), problems
