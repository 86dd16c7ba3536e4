"""Claims between runtimes, as the session actor keeps them (two runtimes in one process).

A second runtime on the same state directory must wait for the first one's
batch instead of delivering it again (SPEC §1: duplicates only after a
crash), keep a session boundary open while it waits (the other job may
still fail), and take over when the claim is released: after a failure, or
when the first runtime exits. A batch the other runtime marked just before
the claim is confirmed away, not delivered (plan, claim, confirm). Each
proof has its planted fault; removing the confirmation step from
``MemorySessionActor._plan`` fails the last one as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.ledger._claim import Claim, decode_claim
from memory.ledger._records import MARKER_KEY
from memory.runtime._claims import ClaimFile, ClaimsLedger, SessionClaims
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome, BoundaryResult, Flush
from memory.writers._extractive import ExtractiveWriter
from store import DurableFiles, SessionCore
from store.lowlevel import CLAIM_NAME, SessionLock
from tests.faults import FaultyWriter
from tests.memory._runtime import chain, marked, tally, virtual_config

TURNS = ["u1", "a1", "u2", "a2"]


async def start_flush(rt: MemoryRuntime, sid: str) -> BoundaryResult:
    result: BoundaryResult = await rt.session_ref(sid).call(Flush())
    return result


def delivered(rt: MemoryRuntime) -> dict[str, int]:
    return {node: n for (_, node), n in tally(rt).deliveries.items()}


async def check_the_second_runtime_waits(tmp_path: Path) -> None:
    gated = FaultyWriter(None, gated=True)
    async with open_runtime(tmp_path, gated, config=virtual_config()) as first, \
            open_runtime(tmp_path, ExtractiveWriter(), config=virtual_config()) as second:
        assert first.instance_id != second.instance_id
        sid = await first.sessions.create(title="shared")
        await chain(first, sid, "ROOT", TURNS)
        first_flush = await start_flush(first, sid)
        await gated.entered.wait()  # the first runtime's batch is in flight
        assert await second.pending(sid) == [], "the claimed batch is owed to the second runtime"
        second_flush = await start_flush(second, sid)
        await anyio.sleep(30)  # virtual: the second looks again many times meanwhile
        assert not second_flush.done.is_set(), "the boundary ended while a batch was in flight"
        assert delivered(second) == {}, "the second runtime delivered the claimed batch again"
        gated.open_gate()
        assert await first_flush.wait() is BoundaryOutcome.WRITTEN
        with anyio.fail_after(10):
            assert await second_flush.wait() is BoundaryOutcome.WRITTEN
        await first.drain()
        await second.drain()
        assert delivered(first) == dict.fromkeys(TURNS, 1)
        assert delivered(second) == {}
    assert sorted(marked(tmp_path, sid)) == sorted(TURNS)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_second_runtime_waits_for_the_claimed_batch(tmp_path: Path) -> None:
    await check_the_second_runtime_waits(tmp_path)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_check_catches_ignored_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never_live(self: Claim, now: float, *, host: str, alive: Any) -> bool:
        return False

    monkeypatch.setattr(Claim, "live", never_live)
    with pytest.raises(AssertionError, match="owed to the second|boundary ended|delivered the claimed"):
        await check_the_second_runtime_waits(tmp_path)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_failed_job_releases_its_claim(tmp_path: Path) -> None:
    gated = FaultyWriter("raise", gated=True)
    async with open_runtime(tmp_path, gated, config=virtual_config()) as first, \
            open_runtime(tmp_path, ExtractiveWriter(), config=virtual_config()) as second:
        sid = await first.sessions.create(title="shared")
        await chain(first, sid, "ROOT", TURNS)
        first_flush = await start_flush(first, sid)
        await gated.entered.wait()
        second_flush = await start_flush(second, sid)
        gated.open_gate()
        assert await first_flush.wait() is BoundaryOutcome.FAILED
        with anyio.fail_after(10):  # far below the lease: the failure released the claim
            assert await second_flush.wait() is BoundaryOutcome.WRITTEN
        await second.drain()
        assert delivered(second) == dict.fromkeys(TURNS, 1)
        await anyio.sleep(60)  # virtual: the first runtime's retry finds nothing owed
        await first.drain()
        assert delivered(first) == dict.fromkeys(TURNS, 1)  # the failed delivery only
    assert sorted(marked(tmp_path, sid)) == sorted(TURNS)


async def check_exit_releases(tmp_path: Path) -> None:
    gated = FaultyWriter(None, gated=True)
    async with open_runtime(tmp_path, ExtractiveWriter(), config=virtual_config()) as second:
        async with open_runtime(tmp_path, gated, config=virtual_config()) as first:
            sid = await first.sessions.create(title="shared")
            await chain(first, sid, "ROOT", TURNS)
            await start_flush(first, sid)
            await gated.entered.wait()
        # the first runtime is gone, its job cancelled (SPEC §8): its claim with it
        claim = (tmp_path / "sessions" / sid / CLAIM_NAME).read_bytes()
        assert decode_claim(claim) is None, "the claim outlived its runtime"
        with anyio.fail_after(10):
            assert await second.flush(sid) is BoundaryOutcome.WRITTEN
        await second.drain()
    assert sorted(marked(tmp_path, sid)) == sorted(TURNS)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_runtime_that_exits_releases_its_claims(tmp_path: Path) -> None:
    await check_exit_releases(tmp_path)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_check_catches_claims_kept_after_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClaimsLedger, "release_all", lambda self: None)
    with pytest.raises(AssertionError, match="outlived its runtime"):
        await check_exit_releases(tmp_path)


async def check_the_claim_confirms_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, catch_up: bool
) -> None:
    """Another runtime marks the batch right before this one claims it: nothing is delivered."""
    claim_batch = SessionClaims.claim_batch

    def others_finish_first(claims: SessionClaims, node_ids: Any, *args: Any) -> bool:
        core = claims.core
        other = SessionCore.open(core.state_dir, core.session)  # the other runtime's owner
        other.merge_node_metadata_batch({n: {MARKER_KEY: workspace} for n in node_ids})
        other.close()
        if not catch_up:  # the planted fault: the claim does not bring the index up to date
            monkeypatch.setattr(SessionCore, "_sync_locked", lambda self: None)
        try:
            return claim_batch(claims, node_ids, *args)
        finally:
            monkeypatch.undo()  # only the first claim races (this undoes both patches)

    async with open_runtime(tmp_path, ExtractiveWriter(), config=virtual_config()) as rt:
        workspace = rt.workspace_id
        sid = await rt.sessions.create(title="shared")
        await chain(rt, sid, "ROOT", TURNS)
        monkeypatch.setattr(SessionClaims, "claim_batch", others_finish_first)
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        assert delivered(rt) == {}, "a batch marked before the claim was delivered again"


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_batch_marked_before_the_claim_is_not_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await check_the_claim_confirms_the_batch(tmp_path, monkeypatch, catch_up=True)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_check_catches_a_claim_that_does_not_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AssertionError, match="delivered again"):
        await check_the_claim_confirms_the_batch(tmp_path, monkeypatch, catch_up=False)


def other_runtime_claims(state: Path, sid: str, nodes: list[str], now: float) -> ClaimFile:
    """Another runtime's live claim on ``nodes``, written behind this runtime's back."""
    directory = str(state / "sessions" / sid)
    claim = ClaimFile(directory, DurableFiles())
    with SessionLock(directory):
        assert claim.take("r-other", nodes, now, lease=3600.0)
    return claim


async def check_a_claim_between_messages(tmp_path: Path) -> None:
    """A claim written between two messages is read by the next one; the trigger waits for it."""
    async with open_runtime(tmp_path, ExtractiveWriter(), config=virtual_config()) as rt:
        sid = await rt.sessions.create(title="shared")
        await chain(rt, sid, "ROOT", ["u1", "a1"])  # far below the threshold
        assert [r.message_id for r in await rt.pending(sid)] == ["u1", "a1"]  # read: no claim
        claim = other_runtime_claims(tmp_path, sid, ["u1", "a1"], rt.config.clock())
        assert [r.message_id for r in await rt.pending(sid)] == [], "the new claim was missed"
        await rt.sessions.append(sid, {"id": "u2", "role": "user", "content": "word " * 8_000,
                                       "predecessor": "a1"})  # the trigger fires
        await anyio.sleep(30)  # virtual: the session looks again meanwhile
        assert delivered(rt) == {}, "a batch another runtime claims was delivered"
        with SessionLock(claim.path.rsplit("/", 1)[0]):
            assert claim.give_back("r-other")
        with anyio.fail_after(600):
            while sorted(marked(tmp_path, sid)) != ["a1", "u1", "u2"]:
                await anyio.sleep(1)
        await rt.drain()
        assert delivered(rt) == dict.fromkeys(["u1", "a1", "u2"], 1)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_claim_written_between_messages_is_seen_and_waited_for(tmp_path: Path) -> None:
    await check_a_claim_between_messages(tmp_path)
