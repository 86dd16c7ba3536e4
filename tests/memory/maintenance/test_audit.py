"""The audit finds every disagreement between markers, archive and topics, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory.ledger._records import MARKER_KEY, SourceMeta, SourceRecord, source_anchor, source_id
from memory.maintenance._audit import AuditInputs, SessionFacts, audit, topic_citations
from memory.maintenance._audit_inputs import read_audit_inputs
from memory.workspace._archive import parse_archive, render_frame
from memory.workspace._legacy import LegacyHeader
from store import SessionCore
from tests.fixture import copy_fixture

WID = "w-aa116220"


def msg(node: str, marker: str | None = None, role: str = "user") -> dict[str, Any]:
    message: dict[str, Any] = {"id": node, "role": role, "content": f"said {node}"}
    if marker is not None:
        message[MARKER_KEY] = marker
    return message


PENDING = SourceMeta(None, "guest/1", "guest", "pending")


def archive_of(sid: str, nodes: list[str]) -> Any:
    """Frames for ``nodes``; a node named ``p...`` is archived pending."""
    frames = [
        render_frame(
            SourceRecord(
                sid,
                n,
                "user",
                f"said {n}",
                1755000000.0,
                "user",
                None,
                PENDING if n.startswith("p") else None,
            )
        )
        for n in nodes
    ]
    return parse_archive(
        ("<!-- openprogram-source-archive:v2 -->\n\n" + "\n".join(frames)).encode(), sid
    )


def topic(*targets: str) -> str:
    out = "# T\n\n"
    for i, target in enumerate(targets):
        label = f"e-{i:010x}"
        out += f"Fact {i}.[^{label}] ^{i:08x}\n\n[^{label}]: Time: `undated`; Sources: [x]({target})\n\n"
    return out


def link(sid: str, node: str, legacy: bool = False) -> str:
    part = "" if legacy else "_v2/"
    return f"../sources/openprogram/{part}{sid}.md#{source_anchor(source_id(sid, node))}"


def run(
    sessions: list[SessionFacts],
    archived: dict[str, list[str]] | None = None,
    topics: dict[str, str] | None = None,
    legacy: dict[str, LegacyHeader] | None = None,
) -> dict[str, Any]:
    archives = {sid: archive_of(sid, nodes) for sid, nodes in (archived or {}).items()}
    return audit(AuditInputs(WID, sessions, archives, legacy or {}, topics or {}))


def linear(sid: str, messages: list[dict[str, Any]]) -> SessionFacts:
    return SessionFacts(sid, messages, {messages[-1]["id"]: messages})


def test_a_consistent_workspace_is_ok() -> None:
    s = linear("s", [msg("m0", WID), msg("m1", WID, "assistant"), msg("m2")])
    report = run([s], {"s": ["m0", "m1"]}, {"topics/t.md": topic(link("s", "m0"))})
    assert report["ok"] and report["marked"] == 2 and report["citations"] == 1


def test_a_marked_turn_missing_from_the_archive_is_reported() -> None:
    s = linear("s", [msg("m0", WID), msg("m1", WID), msg("m2")])
    report = run([s], {"s": ["m0"]})
    assert not report["ok"]
    assert report["marked_not_archived"] == [{"session": "s", "node": "m1"}]


def test_markers_of_another_workspace_are_not_ours_to_check() -> None:
    s = linear("s", [msg("m0", "w-00000000"), msg("m1", WID)])
    report = run([s], {"s": ["m1"]})
    assert report["marked"] == 1
    assert report["marked_not_archived"] == []
    # ...but m0 is not ours, so ours on m1 strands it: not a prefix.
    assert report["non_prefix_branches"] == [
        {"session": "s", "tip": "m1", "unmarked": ["m0"], "last_marked": "m1"}
    ]


def test_a_legacy_first_header_counts_as_archived() -> None:
    header = LegacyHeader(source_id("s", "m0"), "m0", "t", "user")
    s = linear("s", [msg("m0", WID)])
    report = run([s], {}, {"topics/t.md": topic(link("s", "m0", legacy=True))}, {"s": header})
    assert report["ok"]
    # A legacy link to anything but that first header does not resolve.
    report = run(
        [s], {"s": ["m1"]}, {"topics/t.md": topic(link("s", "m1", legacy=True))}, {"s": header}
    )
    assert [u["reason"] for u in report["unresolved_citations"]] == [
        "no archived frame has this anchor"
    ]


def test_unresolved_citations_are_reported() -> None:
    topics = {
        "topics/a.md": topic(link("s", "m0"), link("s", "m9"), link("gone", "m0")),
        "topics/b.md": topic("https://example.com/page#source-0123456789abcdef"),
    }
    report = run([], {"s": ["m0"]}, topics)
    assert not report["ok"]
    assert [(u["topic"], u["target"]) for u in report["unresolved_citations"]] == [
        ("topics/a.md", link("s", "m9")),
        ("topics/a.md", link("gone", "m0")),
        ("topics/b.md", "https://example.com/page#source-0123456789abcdef"),
    ]
    assert report["unresolved_citations"][2]["reason"] == "not a link to a source archive"


def test_a_citation_of_a_pending_frame_is_reported() -> None:
    report = run([], {"s": ["m0", "p1"]}, {"topics/a.md": topic(link("s", "m0"), link("s", "p1"))})
    assert [(u["target"], u["reason"]) for u in report["unresolved_citations"]] == [
        (link("s", "p1"), "the archived frame is pending (never citable)")
    ]


def test_a_topic_that_fails_the_strict_parse_is_reported() -> None:
    report = run([], {}, {"topics/bad.md": "# T\n\nno block id here\n"})
    assert not report["ok"]
    assert [u["topic"] for u in report["unreadable_topics"]] == ["topics/bad.md"]


def test_a_gap_under_a_marker_is_reported_per_branch() -> None:
    trunk = [msg("m0", WID), msg("m1"), msg("t", WID, "tool"), msg("m2", WID), msg("m3")]
    fork = [msg("m0", WID), msg("f0"), msg("f1")]
    s = SessionFacts("s", trunk + fork[1:], {"m3": trunk, "f1": fork})
    report = run([s], {"s": ["m0", "m2"]})
    assert report["non_prefix_branches"] == [
        {"session": "s", "tip": "m3", "unmarked": ["m1"], "last_marked": "m2"}
    ]
    # A tool node is never archived, so our marker on it is reported.
    assert report["marked_not_archived"] == [{"session": "s", "node": "t"}]


def test_citations_are_read_from_every_footnote_link() -> None:
    citations, unreadable = topic_citations({"topics/x/y.md": topic(link("s", "m0"))})
    assert unreadable == []
    [c] = citations
    assert c.topic == "topics/x/y.md" and c.key is None  # ../sources from topics/x is wrong
    citations, _ = topic_citations({"topics/y.md": topic(link("s", "m0"))})
    assert (
        citations[0].key == f"s#{source_anchor(source_id('s', 'm0'))}" and not citations[0].legacy
    )


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(copy_fixture(tmp_path / "state"))


def test_the_reference_fixture_is_consistent(state: str) -> None:
    report = audit(read_audit_inputs(state, WID))
    assert report["ok"], report
    assert report["marked"] == 1 and report["citations"] == 2


def test_planted_faults_in_the_fixture_are_found(state: str) -> None:
    core = SessionCore.open(state, "demo")
    core.merge_node_metadata_batch({"u2": {MARKER_KEY: WID}, "a2b": {MARKER_KEY: WID}})
    owner = Path(state, "memory/topics/people/owner.md")
    owner.write_text(
        owner.read_text().replace("source-aa94d537b6c78a28", "source-0000000000000000")
    )
    report = audit(read_audit_inputs(state, WID))
    assert not report["ok"]
    assert report["marked_not_archived"] == [{"session": "demo", "node": "a2b"}]
    assert [u["footnote"] for u in report["unresolved_citations"]] == ["e-9574e39236"]
    # a2b's path is u1, a1, a2b: a1 carries another workspace's marker, so ours on
    # a2b strands it. (u2 is rewound: on no branch, archived, so no finding.)
    assert report["non_prefix_branches"] == [
        {"session": "demo", "tip": "a2b", "unmarked": ["a1"], "last_marked": "a2b"}
    ]


def test_the_audit_counts_lost_markers_and_only_those() -> None:
    # A message's own trust_state is ignored: session records are always trusted (SPEC §6.1).
    claimed = {**msg("p2"), "trust_state": "pending"}
    s = linear("s", [msg("m0"), msg("m1"), claimed, msg("m3"), msg("m4", WID), msg("m5")])
    # m0 archived and cited: lost; m1 and p2 archived, not cited; m3 never archived;
    # m5 is the owed tail (archived and cited, still not a lost marker).
    report = run([s], {"s": ["m0", "m1", "p2", "m4", "m5"]},
                 {"topics/t.md": topic(link("s", "m0"), link("s", "m4"), link("s", "m5"))})
    assert report["lost_markers"] == [{"session": "s", "node": "m0"}]
    assert not report["ok"]
    assert report["non_prefix_branches"][0]["unmarked"] == ["m0", "m1", "p2", "m3"]
