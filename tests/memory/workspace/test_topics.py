"""The topic grammar: every rule rejects what it should, and rendering is a fixed point."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory._errors import TopicError
from memory.workspace._topics import (
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from tests.fixture import FIXTURE as SAMPLE

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

_words = st.text(alphabet="abcdefghij XYZ,.;:!()-'`*_0123456789", min_size=1, max_size=30)
_text = _words.map(lambda s: " ".join(s.split())).filter(
    lambda s: bool(s) and not s.startswith(("#", "[")) and "^" not in s
)
_hex = st.text(alphabet="0123456789abcdef", min_size=10, max_size=10)


@st.composite
def topics(draw: st.DrawFn) -> Topic:
    blocks: list[Heading | Paragraph] = []
    footnotes: dict[str, Footnote] = {}
    block_ids = iter(draw(st.lists(_hex.map(lambda h: h[:8]), min_size=40, max_size=40,
                                   unique=True)))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            blocks.append(Heading(draw(st.integers(1, 6)), draw(_text)))
            continue
        labels = []
        for _ in range(draw(st.integers(1, 3))):
            reuse: bool = draw(st.booleans())
            if footnotes and reuse:
                labels.append(draw(st.sampled_from(sorted(footnotes))))
                continue
            label = "e-" + draw(_hex)
            footnotes[label] = Footnote(
                label,
                draw(st.sampled_from(["2024", "2025-01", "2025-12-31", "undated"])),
                tuple(
                    SourceLink(draw(_text).replace("[", "").replace("]", "") or "x",
                               f"../s/{draw(_hex)}.md#source-{draw(_hex)}abcdef")
                    for _ in range(draw(st.integers(1, 3)))
                ),
            )
            labels.append(label)
        lines = [draw(_text) for _ in range(draw(st.integers(1, 3)))]
        lines[-1] += "".join(f"[^{label}]" for label in labels)
        ids = tuple(next(block_ids) for _ in range(draw(st.integers(1, 3))))
        blocks.append(Paragraph("\n".join(lines), ids))
    cited = {label for block in blocks if isinstance(block, Paragraph)
             for label in block.citations}
    return Topic(tuple(blocks), {k: v for k, v in footnotes.items() if k in cited})


@settings(max_examples=150, deadline=None)
@given(topics())
def test_write_parse_write_is_a_fixed_point(topic: Topic) -> None:
    text = render_topic(topic)
    parsed = parse_topic(text)
    assert render_topic(parsed) == text
    assert parsed.blocks == topic.blocks
    assert parsed.footnotes == topic.footnotes
