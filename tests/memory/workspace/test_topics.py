"""The topic grammar: every rule rejects what it should, and rendering is a fixed point."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from memory._errors import TopicError
from memory.workspace._topics import (
    Heading,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from tests.fixture import FIXTURE as SAMPLE
from tests.memory.workspace._strategies import topics

FIXTURE = SAMPLE / "memory" / "topics" / "people" / "owner.md"
LINK = "[x](../sources/openprogram/_v2/s.md#source-0123456789abcdef)"
F1 = "e-0123456789"
F2 = "e-abcdefabcd"


def footnote(label: str = F1, when: str = "2025-08") -> str:
    return f"[^{label}]: Time: `{when}`; Sources: {LINK}"


def test_the_reference_file_parses_and_renders_byte_identically() -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    topic = parse_topic(text, "topics/people/owner.md")
    assert [p.block_id for p in topic.paragraphs] == ["37913bbd", "3216f7d0"]
    assert topic.blocks[:2] == (Heading(1, "Owner"), Heading(2, "Food"))
    assert topic.footnotes["e-9574e39236"].when == "2025-08"
    assert topic.footnotes["e-290945cf46"].sources == (
        SourceLink("tea preference",
                   "../../sources/openprogram/_v2/demo.md#source-feaf6d348c725728"),
    )
    assert render_topic(topic) == text


def test_a_unit_may_cite_several_footnotes_and_carry_aliases() -> None:
    text = (
        f"Tea, then biscuits.[^{F1}][^{F2}] ^0000aaaa ^0000bbbb\n\n"
        f"{footnote(F1)}\n\n{footnote(F2, 'undated')}\n"
    )
    topic = parse_topic(text)
    (paragraph,) = topic.paragraphs
    assert paragraph.ids == ("0000aaaa", "0000bbbb")
    assert paragraph.citations == (F1, F2)
    assert render_topic(topic) == text


def test_a_citation_may_sit_inside_a_multiline_paragraph() -> None:
    text = f"First.[^{F1}]\nThen more.[^{F2}] ^0000aaaa\n\n{footnote(F1)}\n\n{footnote(F2)}\n"
    assert render_topic(parse_topic(text)) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"No id.[^{F1}]\n\n{footnote()}\n", "without a block id"),
        (f"Bad id.[^{F1}] ^XYZ\n\n{footnote()}\n", "malformed block id"),
        (f"Trailing.[^{F1}] and more ^0000aaaa\n\n{footnote()}\n", "after the last citation"),
        ("No citation. ^0000aaaa\n", "without a citation"),
        (f"Missing.[^{F2}] ^0000aaaa\n\n{footnote()}\n", "has no footnote"),
        (f"Once.[^{F1}] ^0000aaaa\n\n{footnote()}\n\n{footnote()}\n", "duplicate footnote"),
        (f"Used.[^{F1}] ^0000aaaa\n\n{footnote()}\n\n{footnote(F2)}\n", "never cited"),
        (
            f"A.[^{F1}] ^0000aaaa\n\nB.[^{F1}] ^0000aaaa\n\n{footnote()}\n",
            "duplicate block id",
        ),
        (f"A.[^{F1}] ^0000aaaa ^0000aaaa\n\n{footnote()}\n", "duplicate block id"),
        (f"Local.[^e1] ^0000aaaa\n\n{footnote('e1')}\n", "not a runtime id"),
        (f"A.[^{F1}] ^0000aaaa\n\n{footnote(when='2025-13')}\n", "invalid time"),
        (f"A.[^{F1}] ^0000aaaa\n\n{footnote(when='yesterday')}\n", "invalid time"),
        (f"A.[^{F1}] ^0000aaaa\n\n[^{F1}]: Time: 2025; Sources: {LINK}\n", "malformed footnote"),
        (f"A.[^{F1}] ^0000aaaa\n\n[^{F1}]: Time: `2025`; Sources: raw\n", "malformed sources"),
        (f"A.[^{F1}] ^0000aaaa\n\n[^{F1}]: Time: `2025`; Sources: {LINK}, \n",
         "malformed sources"),
        (f"A.[^{F1}] ^0000aaaa\r\n\r\n{footnote()}\r\n", "carriage return"),
        ("#  \n", "heading needs text"),
    ],
)
def test_the_strict_parser_names_each_broken_rule(text: str, reason: str) -> None:
    with pytest.raises(TopicError, match=reason) as caught:
        parse_topic(text, "topics/t.md")
    assert "topics/t.md" in str(caught.value)


def test_every_valid_time_form_is_accepted() -> None:
    for when in ("2025", "2025-08", "2025-08-31", "undated"):
        parse_topic(f"A.[^{F1}] ^0000aaaa\n\n{footnote(when=when)}\n")
    with pytest.raises(TopicError):
        parse_topic(f"A.[^{F1}] ^0000aaaa\n\n{footnote(when='2025-02-30')}\n")


def test_a_draft_may_omit_ids_and_cite_raw_handles() -> None:
    draft = (
        "A fact.[^e1] ^invented\n\nAnother.[^e2]\n\n"
        "[^e1]: Time: 2025-08; Sources: openprogram/s/n1, [why](openprogram/s/n2)\n\n"
        "[^e2]:Time: `undated` ; Sources: openprogram/s/n3\n"
    )
    topic = parse_topic(draft, strict=False)
    assert [p.ids for p in topic.paragraphs] == [("invented",), ()]
    assert topic.footnotes["e1"].sources == (
        SourceLink("openprogram/s/n1", "openprogram/s/n1"), SourceLink("why", "openprogram/s/n2"),
    )
    with pytest.raises(TopicError, match="after the last citation"):
        parse_topic("Fact.[^e1] tail\n\n[^e1]: Time: `2025`; Sources: openprogram/s/n\n",
                    strict=False)


# -- write -> parse -> write ---------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(topics())
def test_write_parse_write_is_a_fixed_point(topic: Topic) -> None:
    text = render_topic(topic)
    parsed = parse_topic(text)
    assert render_topic(parsed) == text
    assert parsed.blocks == topic.blocks
    assert parsed.footnotes == topic.footnotes
