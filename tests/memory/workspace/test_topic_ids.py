"""Id normalisation reproduces the reference agent's ids and keeps what must be kept."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings

from memory._errors import TopicError
from memory.workspace._topic_ids import (
    NormalisedTopic,
    block_id_for,
    footnote_id_for,
    normalise_topic,
    normalised_body,
    source_key,
    source_link_target,
)
from memory.workspace._topics import Topic, parse_topic, render_topic
from tests.fixture import FIXTURE as SAMPLE
from tests.memory.workspace._strategies import topics

FIXTURE = SAMPLE / "memory" / "topics" / "people" / "owner.md"
PATH = "topics/people/owner.md"
DRAFT = """# Owner

## Food

The owner also wants biscuits.[^e1]

[^e1]: Time: `2025-08`; Sources: [biscuits](openprogram/demo/u2)

The owner prefers tea.[^e2] ^deadbeef

[^e2]: Time: `undated`; Sources: [tea preference](openprogram/demo/u1)
"""


def normalise(
    draft: str, base: str | None = None, path: str = PATH,
    used_ids: set[str] | None = None, used_labels: set[str] | None = None,
) -> NormalisedTopic:
    topic = parse_topic(base, path) if base is not None else None
    existing = set(topic.block_ids()) if topic else set()
    labels = set(topic.footnotes) if topic else set()
    return normalise_topic(
        path, draft, base=topic, existing_ids=existing,
        used_ids=existing | (used_ids or set()), used_labels=labels | (used_labels or set()),
    )


def test_the_fixture_ids_follow_the_documented_hashes() -> None:
    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    assert sha("block|owner.md|The owner also wants biscuits.[^e1]|0")[:8] == "37913bbd"
    assert sha("block|owner.md|The owner prefers tea.[^e1]|0")[:8] == "3216f7d0"
    assert "e-" + sha("evidence|2025-08|openprogram/demo/u2|0")[:10] == "e-9574e39236"
    assert "e-" + sha("evidence|undated|openprogram/demo/u1|0")[:10] == "e-290945cf46"
    assert block_id_for("owner.md", "The owner prefers tea.[^e-290945cf46]", ()) == "3216f7d0"
    assert footnote_id_for("2025-08", ["openprogram/demo/u2"], ()) == "e-9574e39236"


def test_a_writer_draft_becomes_the_reference_file_byte_for_byte() -> None:
    result = normalise(DRAFT)
    assert result.text == FIXTURE.read_text(encoding="utf-8")
    assert result.block_ids == {"37913bbd", "3216f7d0"}
    assert result.handles == {"openprogram/demo/u1", "openprogram/demo/u2"}


def test_link_targets_are_relative_to_the_topic_file() -> None:
    assert source_link_target(PATH, "openprogram/demo/u2") == (
        "../../sources/openprogram/_v2/demo.md#source-aa94d537b6c78a28"
    )
    assert source_link_target("topics/core.md", "openprogram/demo/u2") == (
        "../sources/openprogram/_v2/demo.md#source-aa94d537b6c78a28"
    )
    target = "../../sources/openprogram/_v2/demo.md#source-aa94d537b6c78a28"
    assert source_key(PATH, target) == "demo#source-aa94d537b6c78a28"
    assert source_key(PATH, "https://example.com/#source-aa94d537b6c78a28") is None


def test_the_body_hash_ignores_label_names_and_whitespace() -> None:
    assert normalised_body("A  fact.[^e7]\nmore.[^x][^e7]") == "A fact.[^e1] more.[^e2][^e1]"


def test_counters_break_collisions() -> None:
    first = block_id_for("owner.md", "The owner prefers tea.[^e1]", ())
    second = block_id_for("owner.md", "The owner prefers tea.[^e1]", {first})
    assert second != first
    assert second == hashlib.sha256(
        b"block|owner.md|The owner prefers tea.[^e1]|1").hexdigest()[:8]
    two = footnote_id_for("2025", ["openprogram/s/a", "openprogram/s/b"], ())
    assert two == "e-" + hashlib.sha256(
        b"evidence|2025|openprogram/s/a, openprogram/s/b|0").hexdigest()[:10]


def test_same_statement_twice_in_one_draft_gets_two_ids() -> None:
    draft = ("Same.[^e1]\n\nSame.[^e2]\n\n[^e1]: Time: `2025`; Sources: openprogram/s/a\n\n"
             "[^e2]: Time: `2025`; Sources: openprogram/s/b\n")
    result = normalise(draft, path="topics/x.md")
    assert result.text is not None
    assert len(result.block_ids) == 2


def test_existing_ids_of_unchanged_paragraphs_are_kept_and_invented_ones_stripped() -> None:
    base = FIXTURE.read_text(encoding="utf-8")
    # The writer re-wrote the file in draft form: fresh local labels, one id
    # dropped, one invented id, and a new paragraph.
    draft = """# Owner

## Food

The owner also wants biscuits.[^e1]

[^e1]: Time: `2025-08`; Sources: [biscuits](openprogram/demo/u2)

The owner prefers tea.[^e-290945cf46] ^3216f7d0 ^cafef00d

[^e-290945cf46]: Time: `undated`; Sources: [tea preference](../../sources/openprogram/_v2/demo.md#source-feaf6d348c725728)

The owner dislikes coffee.[^e2] ^0badc0de

[^e2]: Time: `2025-08`; Sources: openprogram/demo/a2
"""
    result = normalise(draft, base)
    assert result.text is not None
    topic = parse_topic(result.text, PATH)
    ids = [p.ids for p in topic.paragraphs]
    assert ids[0] == ("37913bbd",)  # same body: the old id comes back
    assert ids[1] == ("3216f7d0",)  # kept, invented alias stripped
    assert ids[2] != ("0badc0de",) and len(ids[2]) == 1
    assert result.kept_ids == {"37913bbd", "3216f7d0"}
    assert result.linked == frozenset()  # an unchanged footnote needs no new check
    assert "[^e-290945cf46]" in result.text  # an unchanged footnote keeps its label


def test_a_merge_keeps_both_ids_as_primary_and_alias() -> None:
    base = FIXTURE.read_text(encoding="utf-8")
    draft = (
        "# Owner\n\nThe owner wants tea and biscuits.[^e1][^e2] ^3216f7d0 ^37913bbd\n\n"
        "[^e1]: Time: `undated`; Sources: openprogram/demo/u1\n\n"
        "[^e2]: Time: `2025-08`; Sources: openprogram/demo/u2\n"
    )
    result = normalise(draft, base)
    assert result.text is not None
    assert parse_topic(result.text).paragraphs[0].ids == ("3216f7d0", "37913bbd")


def test_a_kept_id_on_two_paragraphs_is_refused() -> None:
    base = FIXTURE.read_text(encoding="utf-8")
    draft = ("A.[^e1] ^3216f7d0\n\nB.[^e1x] ^3216f7d0\n\n"
             "[^e1]: Time: `2025`; Sources: openprogram/demo/u1\n\n"
             "[^e1x]: Time: `2025`; Sources: openprogram/demo/u1\n")
    with pytest.raises(TopicError, match="kept on two paragraphs"):
        normalise(draft, base)


def test_a_file_with_no_unit_left_is_pruned() -> None:
    result = normalise("# Owner\n\n## Food\n", FIXTURE.read_text(encoding="utf-8"))
    assert result.text is None and result.block_ids == frozenset()


def test_a_footnote_must_cite_a_handle_or_an_archive_link() -> None:
    with pytest.raises(TopicError, match="raw source handle"):
        normalise("A.[^e1]\n\n[^e1]: Time: `2025`; Sources: [web](https://example.com)\n")


def test_labels_avoid_every_label_used_in_the_workspace() -> None:
    taken = footnote_id_for("2025-08", ["openprogram/demo/u2"], ())
    result = normalise(DRAFT, used_labels={taken})
    assert result.text is not None and taken not in result.text


def test_the_same_invented_id_on_two_paragraphs_is_simply_stripped() -> None:
    draft = ("A.[^e1] ^mine\n\nB.[^e2] ^mine\n\n"
             "[^e1]: Time: `2025`; Sources: openprogram/s/a\n\n"
             "[^e2]: Time: `2025`; Sources: openprogram/s/b\n")
    result = normalise(draft, path="topics/x.md")
    assert result.text is not None and "^mine" not in result.text
    assert len(result.block_ids) == 2


@settings(max_examples=80, deadline=None)
@given(topics())
def test_normalising_a_committed_file_changes_nothing(topic: Topic) -> None:
    text = render_topic(topic)
    base = parse_topic(text, "topics/x.md")
    result = normalise_topic(
        "topics/x.md", text, base=base, existing_ids=set(base.block_ids()),
        used_ids=set(base.block_ids()), used_labels=set(base.footnotes),
    )
    assert result.text == (text if base.paragraphs else None)
    assert result.new_ids == ()
