"""The model writer's prompt: observed evidence as JSON lines, plus the workspace's shape."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone

from memory.ledger._records import SourceMeta, SourceRecord
from memory.workspace._edits import WorkspaceSnapshot
from memory.writers._prompt import (
    TopicOutline,
    outline_snapshot,
    outline_topic,
    render_observations,
    render_prompt,
    render_workspace,
)
from tests.memory._fixture import FIXTURE

DAY = 86_400.0
T0 = 1755000002.0  # 2025-08-12T12:00:02Z


def rec(mid: str, content: str, ts: float, *, pending: bool = False) -> SourceRecord:
    meta = SourceMeta(None, "g", "guest", "pending") if pending else None
    return SourceRecord("s1", mid, "user", content, ts, "Ann (ann/1)", "ann/1", meta)


def test_one_observed_section_per_date_with_parseable_lines() -> None:
    records = [
        rec("m1", "tea\nplease", T0),
        rec("m2", 'says "hi"', T0 + 60),
        rec("m3", "next day ✓", T0 + DAY),
    ]
    text = render_observations(records, tz=UTC)
    assert text.splitlines()[0] == "## Observed 2025-08-12"
    assert "## Observed 2025-08-13" in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert lines == [
        {"ref": "openprogram/s1/m1", "speaker": "Ann (ann/1)", "content": "tea\nplease"},
        {"ref": "openprogram/s1/m2", "speaker": "Ann (ann/1)", "content": 'says "hi"'},
        {"ref": "openprogram/s1/m3", "speaker": "Ann (ann/1)", "content": "next day ✓"},
    ]
    assert "✓" in text  # not \u-escaped: the model reads the text as written
    assert list(json.loads(text.splitlines()[2])) == ["ref", "speaker", "content"]


def test_dates_are_local_dates() -> None:
    late = T0 + 11 * 3600  # 23:00:02 UTC
    assert "## Observed 2025-08-12" in render_observations([rec("m1", "x", late)], tz=UTC)
    plus2 = timezone(timedelta(hours=2))
    assert "## Observed 2025-08-13" in render_observations([rec("m1", "x", late)], tz=plus2)


def test_a_date_seen_again_later_opens_a_new_section_in_batch_order() -> None:
    records = [rec("m1", "a", T0), rec("m2", "b", T0 + DAY), rec("m3", "c", T0)]
    headings = [
        line for line in render_observations(records, tz=UTC).splitlines() if line.startswith("## ")
    ]
    assert headings == [
        "## Observed 2025-08-12",
        "## Observed 2025-08-13",
        "## Observed 2025-08-12",
    ]


def test_pending_records_are_not_offered_for_citation() -> None:
    text = render_observations(
        [rec("m1", "trusted", T0), rec("m2", "pending", T0, pending=True)], tz=UTC
    )
    assert "openprogram/s1/m1" in text and "openprogram/s1/m2" not in text
    assert render_observations([rec("m2", "p", T0, pending=True)], tz=UTC) == ""


def test_outline_of_the_fixture_topic_and_fenced_headings_skipped() -> None:
    path = FIXTURE / "memory" / "topics" / "people" / "owner.md"
    outline = outline_topic("topics/people/owner.md", path.read_text(encoding="utf-8"))
    assert outline == TopicOutline("topics/people/owner.md", ("# Owner", "## Food"))
    fenced = "# A\n```\n# not a heading\n```\n## B\n~~~\n## no\n~~~\n#nospace\n"
    assert outline_topic("t.md", fenced).headings == ("# A", "## B")


def test_workspace_section_lists_topics_sorted_with_headings() -> None:
    text = render_workspace(
        [TopicOutline("topics/z.md", ("# Z",)), TopicOutline("topics/a.md", ("# A", "## Sub"))]
    )
    assert text == "## Workspace\n\n- topics/a.md\n  - # A\n  - ## Sub\n- topics/z.md\n  - # Z\n"
    assert "(no topic files yet)" in render_workspace([])


def test_whole_prompt_is_workspace_then_observations() -> None:
    prompt = render_prompt(
        [rec("m1", "tea", T0)], [TopicOutline("topics/core.md", ("# Core",))], tz=UTC
    )
    assert prompt.index("## Workspace") < prompt.index("## Observed 2025-08-12")
    assert prompt.endswith('"content": "tea"}\n')
    assert render_prompt([], [], tz=UTC) == "## Workspace\n\n(no topic files yet)\n"


def test_outline_of_a_snapshot_reads_its_topics() -> None:
    texts = {"topics/a.md": "# A\n\n## One\n", "topics/b.md": "no heading\n"}
    snapshot = WorkspaceSnapshot("rev", tuple(texts), texts.__getitem__)
    assert outline_snapshot(snapshot) == [
        TopicOutline("topics/a.md", ("# A", "## One")),
        TopicOutline("topics/b.md", ()),
    ]
