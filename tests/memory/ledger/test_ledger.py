"""The ledger rules: records filter, the owed tail, batches and triggers (pure, no loop)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory._errors import (
    InvalidThresholdError,
    MissingAuthorityError,
    ReferenceThresholdWarning,
    UnidentifiedMessageError,
)
from memory.ledger._ledger import (
    DEFAULT_IDLE_AFTER,
    DEFAULT_THRESHOLD,
    WritePolicy,
    first_batch,
    may_write,
    message_text,
    records_from_branch,
    should_write,
    should_write_at_boundary,
    source_meta,
    speaker_label,
    unwritten_turns,
)
from memory.ledger._records import MARKER_KEY, SourceMeta, SourceRecord
from memory.ledger._tails import NodeRecords
from store import SessionCore
from tests.memory._fixture import message

WS = "w-aa116220"
# The six fields of SPEC §6.1, complete, for the owner tier.
OWNER_AUTHORITY = {
    "speaker_kind": "owner", "speaker_id": "owner/local", "speaker_display": "Owner",
    "principal_id": "owner/install/x", "authority_tier": "owner", "interaction": "interactive",
}


def msg(mid: str | None, content: Any = "text", role: str = "user", **extra: Any) -> dict[str, Any]:
    view: dict[str, Any] = {"role": role, "content": content, "timestamp": 100.0, **extra}
    if mid is not None:
        view["id"] = mid
    return view


def ids(records: list[SourceRecord]) -> list[str]:
    return [r.message_id for r in records]


# -- SPEC §6.1: the records filter -----------------------------------------------------


def test_only_user_and_assistant_turns_with_text_that_are_not_runtime_turns() -> None:
    branch = [
        msg("u1"),
        msg("t1", role="tool"),
        msg("s1", role="system"),
        msg("r1", display="runtime"),
        msg("r2", source="job_followup"),
        msg("r3", role="assistant", source="merge_turn"),
        msg("e1", "   \n "),
        msg("e2", None),
        msg("e3", [{"type": "image", "url": "x"}]),
        msg("a1", role="assistant"),
        msg("w1", source="web"),  # an ordinary source is not a runtime turn
    ]
    assert ids(records_from_branch("s", branch)) == ["u1", "a1", "w1"]


def test_content_lists_contribute_their_text_parts() -> None:
    content = [
        {"type": "text", "text": "first"},
        {"type": "image", "text": "not me"},
        {"type": "text", "text": ""},
        "stray string",
        {"type": "text", "text": "second\r\n"},
    ]
    assert message_text({"content": content}) == "first\nsecond"
    [record] = records_from_branch("s", [msg("u1", content)])
    assert record.content == "first\nsecond"


def test_a_kept_message_without_an_id_is_an_error_but_a_dropped_one_is_not() -> None:
    records_from_branch("s", [msg(None, role="tool"), msg(None, "  ")])
    with pytest.raises(UnidentifiedMessageError, match=r"session 's': message at branch position 1"):
        records_from_branch("s", [msg("u1"), msg(None)])
    with pytest.raises(UnidentifiedMessageError):
        records_from_branch("s", [msg("")])


def test_fixture_branch_records_carry_label_meta_marker_and_tokens() -> None:
    records = records_from_branch("demo", [message("u1"), message("a1"), message("a2b")])
    u1, a1, a2b = records
    assert (u1.role, a1.role) == ("user", "assistant")
    assert u1.speaker == "Owner (owner/local)" and u1.speaker_id == "owner/local"
    assert u1.meta == SourceMeta("owner", "owner/install/fd91530a8f9d4d41", "owner", "trusted")
    assert (u1.marker, a1.marker, a2b.marker) == ("w-aa116220", "w-4f21c8e0", None)
    assert u1.timestamp == 1755000002.0 and u1.tokens > 0
    # the spawn root's "agent_spawn" source is an ordinary turn
    assert ids(records_from_branch("demo", [message("sp1")])) == ["sp1"]


def test_speaker_label_rules() -> None:
    both = {"role": "user", "speaker_display": "Ann", "speaker_id": "ann/1"}
    assert speaker_label(both) == "Ann (ann/1)"
    assert speaker_label({"role": "user", "speaker_display": " Ann\n B "}) == "Ann B"
    assert speaker_label({"role": "user", "speaker_id": "ann/1"}) == "ann/1"
    assert speaker_label({"role": "assistant", "speaker_display": "  "}) == "assistant"
    [only_name] = records_from_branch("s", [msg("u1", speaker_display="Ann")])
    assert only_name.speaker_id == ""  # the reference writes an empty speaker-id then
    [nobody] = records_from_branch("s", [msg("u1")])
    assert nobody.speaker == "user" and nobody.speaker_id is None and nobody.meta is None


@pytest.mark.parametrize(
    ("fields", "kind", "tier"),
    [
        ({"authority_tier": "owner"}, "unknown", None),  # incomplete, unstamped: legacy
        ({"authority_tier": "guest"}, "unknown", None),
        ({"speaker_kind": "guest", "trust_state": "pending"}, "unknown", None),
        ({**OWNER_AUTHORITY, "trust_state": "pending"}, "owner", "owner"),
        ({**OWNER_AUTHORITY, "authority_tier": "paired"}, "owner", "paired"),
        ({**OWNER_AUTHORITY, "authority_tier": "guest"}, "unknown", None),
    ],
)
def test_source_meta_rules(fields: dict[str, Any], kind: str, tier: str | None) -> None:
    # SPEC §6.1: session records are always trusted, whatever a message claims.
    meta = source_meta(fields)
    assert meta is not None
    assert (meta.trust_state, meta.speaker_kind, meta.authority_tier) == ("trusted", kind, tier)
    expected = fields["principal_id"] if tier is not None else "unknown"
    assert meta.principal_id == expected


def test_speaker_authority_decides_what_is_a_record() -> None:
    owner = msg("u1", **OWNER_AUTHORITY, authority_schema=1)
    browser = msg("b1", **{**OWNER_AUTHORITY, "authority_tier": "mcp_browser"},
                  authority_schema=1)
    legacy = msg("l1", speaker_id="ann/1")
    assert ids(records_from_branch("s", [owner, browser, legacy])) == ["u1", "l1"]
    for key in ("speaker_kind", "interaction", "principal_id"):
        stamped = msg("x9", **{**OWNER_AUTHORITY, key: ""}, authority_schema=1)
        with pytest.raises(MissingAuthorityError, match=rf"session 's', node 'x9'.*{key}"):
            records_from_branch("s", [owner, stamped])
    odd_tier = msg("x8", **{**OWNER_AUTHORITY, "authority_tier": "guest"}, authority_schema=1)
    with pytest.raises(MissingAuthorityError, match=r"node 'x8'.*'guest'"):
        records_from_branch("s", [odd_tier])


# -- SPEC §6.2: what a branch owes --------------------------------------------------------


def chain(*markers: str | None) -> list[SourceRecord]:
    return [
        SourceRecord("s", f"m{i}", "user", "x", 100.0 + i, "user", marker=m, tokens=10)
        for i, m in enumerate(markers)
    ]


def test_unwritten_is_the_tail_after_the_last_own_marker() -> None:
    assert ids(unwritten_turns(chain(WS, WS, None, None), WS)) == ["m2", "m3"]
    assert ids(unwritten_turns(chain(None, WS, None), WS)) == ["m2"]  # an older gap is not owed
    assert ids(unwritten_turns(chain(WS, WS), WS)) == []
    assert ids(unwritten_turns(chain(None, None), WS)) == ["m0", "m1"]
    assert ids(unwritten_turns([], WS)) == []


def test_a_foreign_marker_does_not_count() -> None:
    assert ids(unwritten_turns(chain(WS, "w-4f21c8e0", None), WS)) == ["m1", "m2"]
    assert ids(unwritten_turns(chain("w-4f21c8e0"), WS)) == ["m0"]


def test_fixture_head_branch_owes_the_turn_with_the_foreign_marker() -> None:
    records = records_from_branch("demo", [message("u1"), message("a1")])
    assert ids(unwritten_turns(records, "w-aa116220")) == ["a1"]
    assert ids(unwritten_turns(records, "w-4f21c8e0")) == []


def test_a_fork_at_a_marked_turn_owes_only_its_own_turns() -> None:
    # SPEC §6.5: m0..m3 were written on one branch; a fork at m3 owes its own turns.
    shared = chain(WS, WS, WS, WS)
    fork = shared + [
        SourceRecord("s", f"f{i}", "user", "x", 200.0, "user", tokens=1) for i in range(2)
    ]
    assert ids(unwritten_turns(fork, WS)) == ["f0", "f1"]


@given(st.lists(st.sampled_from([WS, "w-00000000", None]), max_size=30))
def test_owed_is_always_the_maximal_unmarked_tail(markers: list[str | None]) -> None:
    records = chain(*markers)
    owed = unwritten_turns(records, WS)
    assert records[len(records) - len(owed) :] == owed
    assert all(r.marker != WS for r in owed)
    if len(owed) < len(records):
        assert records[len(records) - len(owed) - 1].marker == WS


# -- SPEC §6.3: batches and triggers ------------------------------------------------------


def sized(*tokens: int, at: float = 100.0) -> list[SourceRecord]:
    return [
        SourceRecord("s", f"m{i}", "user", "x", at, "user", tokens=t) for i, t in enumerate(tokens)
    ]


def test_first_batch_is_the_prefix_that_reaches_the_threshold() -> None:
    assert ids(first_batch(sized(5, 5, 5, 5), 10)) == ["m0", "m1"]
    assert ids(first_batch(sized(5, 4, 5), 10)) == ["m0", "m1", "m2"]
    assert ids(first_batch(sized(30, 1), 10)) == ["m0"]  # one huge record is a batch alone
    assert ids(first_batch(sized(1, 2), 10)) == ["m0", "m1"]  # never reached: everything
    assert first_batch([], 10) == []


def test_policy_defaults_and_allowed_thresholds() -> None:
    policy = WritePolicy()
    assert (policy.threshold, policy.idle_after) == (DEFAULT_THRESHOLD, DEFAULT_IDLE_AFTER)
    assert (DEFAULT_THRESHOLD, DEFAULT_IDLE_AFTER) == (16_000, 3600.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for allowed in (8_000, 16_000, 32_000):
            WritePolicy(threshold=allowed)  # the reference agent's: no warning
    # another threshold is allowed, with a warning that the reference would refuse it
    with pytest.warns(ReferenceThresholdWarning, match="12000 is not one of 8000, 16000, 32000"):
        assert WritePolicy(threshold=12_000).threshold == 12_000
    for bad in (0, -5, True):
        with pytest.raises(InvalidThresholdError, match="not a positive integer"):
            WritePolicy(threshold=bad)
    with pytest.raises(ValueError):
        WritePolicy(idle_after=0)


def test_incremental_trigger_on_tokens_or_idleness() -> None:
    policy = WritePolicy(threshold=8_000, idle_after=3600.0)
    last_at = 1_000.0
    assert should_write(sized(4_000, 4_000, at=last_at), last_at, policy)  # reached
    assert not should_write(sized(4_000, 3_999, at=last_at), last_at + 3599.0, policy)
    assert should_write(sized(1, at=last_at), last_at + 3600.0, policy)  # idle for an hour
    assert not should_write([], last_at + 10**6, policy)  # nothing owed
    assert not should_write(sized(0, at=last_at), last_at + 10**6, policy)  # zero tokens


def test_idleness_is_measured_from_the_last_owed_record() -> None:
    policy = WritePolicy(threshold=8_000)
    owed = sized(1, 1, at=0.0)
    owed[-1] = SourceRecord("s", "late", "user", "x", 5_000.0, "user", tokens=1)
    assert not should_write(owed, 5_000.0 + 3599.0, policy)
    assert should_write(owed, 5_000.0 + 3600.0, policy)


TOKENS = st.one_of(st.sampled_from([-4_000, 0, 1, 3_999, 4_000, 8_000]), st.integers(-50, 9_000))


@given(st.lists(st.tuples(TOKENS, st.floats(0.0, 10_000.0)), max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8),
       st.one_of(st.floats(0.0, 3_000.0), st.floats(0.0, 20_000.0)))
def test_may_write_holds_whenever_any_part_of_the_owed_tail_triggers(
    shape: list[tuple[int, float]], kept: list[bool], now: float
) -> None:
    """The runtime skips reading the claim file when may_write is False: never a missed write.

    Whatever other jobs hold is removed from the owed tail after the check,
    so the check must cover every subsequence.
    """
    policy = WritePolicy(threshold=8_000, idle_after=3600.0)
    owed = [SourceRecord("s", f"n{i}", "user", "x", at, "user", tokens=tokens)
            for i, (tokens, at) in enumerate(shape)]
    part = [record for record, keep in zip(owed, kept) if keep]
    if should_write(part, now, policy):
        assert may_write(owed, now, policy)
    if should_write(owed, now, policy):
        assert may_write(owed, now, policy)


def test_may_write_is_false_for_a_short_fresh_tail() -> None:
    policy = WritePolicy(threshold=8_000, idle_after=3600.0)
    assert not may_write(sized(4_000, 3_999, at=1_000.0), 1_000.0 + 3599.0, policy)
    assert not may_write([], 10**6, policy)
    # an old record ahead of a fresh one: a part of the tail may be idle
    owed = sized(1, 1, at=0.0)
    owed[-1] = SourceRecord("s", "late", "user", "x", 5_000.0, "user", tokens=1)
    assert may_write(owed, 3600.0, policy) and not should_write(owed, 3600.0, policy)
    # a counter's negative count cannot hide a part that reaches the threshold
    mixed = [SourceRecord("s", "big", "user", "x", 0.0, "user", tokens=8_000),
             SourceRecord("s", "odd", "user", "x", 0.0, "user", tokens=-4_000)]
    assert may_write(mixed, 1.0, policy) and should_write(mixed[:1], 1.0, policy)


def test_session_boundary_writes_the_head_fully_and_other_tips_at_the_threshold() -> None:
    policy = WritePolicy(threshold=8_000)
    assert should_write_at_boundary(sized(1), head=True, policy=policy)
    assert not should_write_at_boundary([], head=True, policy=policy)
    assert not should_write_at_boundary(sized(7_999), head=False, policy=policy)
    assert should_write_at_boundary(sized(8_000), head=False, policy=policy)


def test_marker_key_is_read_from_the_message_view() -> None:
    [record] = records_from_branch("s", [msg("u1", **{MARKER_KEY: WS})])
    assert record.marker == WS


def test_node_records_follow_a_merge_and_build_each_record_once(tmp_path: Path) -> None:
    """Kept records are the node's own: a merged marker shows, or the ledger would re-deliver."""
    core = SessionCore.create(tmp_path, "s1")
    for index in range(4):
        core.append({"id": f"m{index}", "role": "user" if index % 2 == 0 else "assistant",
                     "content": f"turn {index}"})
    built: list[str] = []

    def counting(text: str) -> int:
        built.append(text)
        return len(text)

    records = NodeRecords("s1", counter=counting)

    def owed() -> list[str]:
        return ids(records.owed(core.nodes_back(), core.branch_nodes, "w-1"))

    assert owed() == ["m0", "m1", "m2", "m3"]
    assert owed() == ["m0", "m1", "m2", "m3"] and len(built) == 4  # the second walk built none
    core.merge_node_metadata_batch({"m0": {MARKER_KEY: "w-1"}, "m1": {MARKER_KEY: "w-1"}})
    assert owed() == ["m2", "m3"]
    assert len(built) == 5  # m1 is a new object, rebuilt; the walk stops there, before m0


def _refused_twice(tmp_path: Path) -> tuple[SessionCore, str, str]:
    core = SessionCore.create(tmp_path / "state", "s1")
    core.append({"role": "user", "content": "I prefer tea."})
    older = core.append({"role": "user", "content": "A goat.", "authority_schema": None})
    newer = core.append({"role": "assistant", "content": "Noted.", "authority_schema": ""})
    return core, older["id"], newer["id"]


def test_the_walk_back_names_the_oldest_refused_node_as_records_from_branch(
    tmp_path: Path,
) -> None:
    core, older, _ = _refused_twice(tmp_path)
    with pytest.raises(MissingAuthorityError) as from_root:
        records_from_branch("s1", core.get_branch())
    with pytest.raises(MissingAuthorityError) as walked_back:
        NodeRecords("s1").owed(core.nodes_back(), core.branch_nodes, "w-0000abcd")
    assert walked_back.value.node == from_root.value.node == older


def test_a_broken_chain_behind_a_refused_node_keeps_the_walk_backs_error(
    tmp_path: Path,
) -> None:
    from store._errors import BrokenChainError

    core, _, newer = _refused_twice(tmp_path)

    def broken() -> list[Any]:
        raise BrokenChainError("s1", newer, "x", "a node file is missing")

    with pytest.raises(MissingAuthorityError) as walked_back:
        NodeRecords("s1").owed(core.nodes_back(), broken, "w-0000abcd")
    assert walked_back.value.node == newer
