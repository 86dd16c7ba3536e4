"""The ranking rules as pure functions: time against a paragraph's footnote days, no repeats."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from memory.ledger import estimate_tokens
from memory.recall import Hit, Unit, pack_context, parse_query, rank_units
from memory.recall._pack import known_words_text, notes_of
from memory.recall._rank import TIME_BOOST, TIME_MISS, TOPIC_WEIGHT

AS_OF = datetime(2023, 12, 1, tzinfo=UTC).timestamp()


def turn(node_id: str, day: datetime) -> Unit:
    start = day.timestamp()
    return Unit(kind="source", path="sources/openprogram/_v2/lake.md", seq=0,
                text="We swam in the lake.", when=day.isoformat(), start=start,
                end=start + 1.0, session="lake", node_id=node_id, anchor=f"source-{node_id}",
                speaker="user")


MAY = turn("m1", datetime(2023, 5, 8, 14, tzinfo=UTC))
JULY = turn("j1", datetime(2023, 7, 20, 14, tzinfo=UTC))
# The extractive writer's merge: the same fact said on two days, one paragraph, two footnotes.
MERGED = Unit(kind="topic", path="topics/notes.md", seq=0,
              text="User (8 May 2023): We swam in the lake.", when="2023-05-08, 2023-07-20",
              start=MAY.start, end=(JULY.start or 0) + 86400.0, block_id="b1",
              sources=("lake#source-m1", "lake#source-j1"))
CITED = {"lake#source-m1": MAY, "lake#source-j1": JULY}


def ranked(query: str) -> list[tuple[str, str | None, float]]:
    hits = rank_units([(MERGED, 1.0), (MAY, TOPIC_WEIGHT / 2), (JULY, TOPIC_WEIGHT / 2)],
                      parse_query(query, as_of=AS_OF), cited=CITED)
    return [(hit.kind, hit.node_id, hit.score) for hit in hits]


def test_a_merged_paragraph_is_of_its_footnote_days_not_of_the_span_between() -> None:
    # June lies between the two days: the paragraph is not of June, nor is either turn.
    assert ranked("swam lake June 2023")[0] == ("topic", None, TOPIC_WEIGHT * TIME_MISS)
    assert ranked("swam lake July 2023")[0] == ("topic", None, TOPIC_WEIGHT * TIME_BOOST)


def test_a_merged_paragraph_does_not_hide_the_turn_of_the_asked_time() -> None:
    # Asked about one of its days, the paragraph still hides the turn of the other day...
    assert [(k, n) for k, n, _ in ranked("swam lake on 8 May 2023")] == [
        ("topic", None), ("source", "m1")]
    assert [(k, n) for k, n, _ in ranked("swam lake in July 2023")] == [
        ("topic", None), ("source", "j1")]
    # ...and with no time asked, or a time holding both days, it stands for both.
    assert [(k, n) for k, n, _ in ranked("swam lake")] == [("topic", None)]
    assert [(k, n) for k, n, _ in ranked("swam lake in 2023")] == [("topic", None)]


def test_a_paragraph_that_says_more_than_its_quoted_turn_is_shown_with_it() -> None:
    from memory.ledger import estimate_tokens
    from memory.recall import Hit, pack_context
    from memory.recall._pack import notes_of
    from memory.recall._rank import without_repeats

    said = Hit("source", "Yeah, I painted that lake sunrise last year! It's special to me.", 2.0,
               "8 May 2023", "sources/openprogram/_v2/c.md", session="c", node_id="D1-14",
               speaker="Melanie", seq=14)
    other = dataclasses.replace(said, text="Painting is fun.", node_id="D1-16", seq=16, score=1.0)
    resolved = Hit("topic", "Melanie (8 May 2023): Yeah, I painted that lake sunrise last year "
                   "(2022)!", 0.5, "2023-05-08", "topics/notes.md", block_id="b1",
                   sources=(("c", "D1-14"),))
    same = dataclasses.replace(resolved, text="Melanie (8 May 2023): Painting is fun.",
                               block_id="b2", sources=(("c", "D1-16"),))
    ranked = [said, other, resolved, same]
    turns = {("c", "D1-14"): said.text, ("c", "D1-16"): other.text}
    notes = notes_of(ranked, turns)
    assert notes == {("c", "D1-14"): [resolved]}  # "Painting is fun." says nothing more
    hits = without_repeats(ranked)
    assert [h.block_id for h in hits if h.kind == "topic"] == []  # no repeats drops both...
    block = pack_context(hits, 200, estimate_tokens, notes=notes, session="c")
    # ...but the one that resolves "last year" is shown right after the turn it cites
    assert block.quoted == (("c", "D1-14"), ("c", "D1-16"))
    assert [h.block_id for h in block.hits] == [None, "b1", None]
    assert "(2022)" in block.text and block.cited == (("c", "D1-14"),)
    # the session asked from is named once; its turns by node id
    assert block.text.splitlines()[0] == "Session c, its turns by node id:"
    assert "- [8 May 2023] Melanie (D1-14): Yeah" in block.text


def _said(text: str, node: str = "h1") -> Hit:
    return Hit("source", text, 1.0, "25 August 2023", "sources/openprogram/_v2/walk.md",
               session="walk", node_id=node, speaker="Caroline", seq=0,
               when="2023-08-25T14:00:00+00:00")


def test_a_quoted_turn_shows_its_relative_dates_resolved_from_the_day_it_was_said() -> None:
    turn = _said("I went hiking last week and got lost two days ago.")
    context = pack_context([turn], 200, estimate_tokens)
    assert ("I went hiking last week (the week before 25 August 2023) and got lost"
            " two days ago (23 August 2023).") in context.text
    assert context.quoted == (("walk", "h1"),) and context.tokens <= 200
    # what recall returns is the turn's words as said; only the block resolves them
    assert turn.text == "I went hiking last week and got lost two days ago."


def test_a_paragraph_that_adds_only_the_resolved_date_is_no_note() -> None:
    turn = _said("I went hiking last week.")
    paragraph = Hit("topic", "Caroline (25 August 2023): I went hiking last week (the week of"
                    " 14 August 2023).", 0.5, "2023-08-25", "topics/notes.md", block_id="b1",
                    sources=(("walk", "h1"),))
    assert notes_of([turn, paragraph], {("walk", "h1"): known_words_text(turn)}) == {}
    # a paragraph that says more than the turn is still a note
    more = dataclasses.replace(paragraph, text="Caroline (25 August 2023): I went hiking"
                               " last week with Mel on Mount Tam.")
    assert notes_of([turn, more], {("walk", "h1"): known_words_text(turn)}) == {
        ("walk", "h1"): [more]}
