"""Leased claims: the rules (memory.ledger._claim), and SessionClaims under the session lock."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.ledger._claim import Claim, decode_claim, encode_claim
from memory.runtime._claims import ClaimFile, SessionClaims, pid_alive, release_claim
from store import DurableFiles, SessionCore, SessionOptions, UnsafeIdError
from store.lowlevel import CLAIM_NAME
from tests.faults import FaultyFiles

HOST = "this-host"


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def session(tmp_path: Path, files: DurableFiles | None = None) -> SessionClaims:
    core = SessionCore.create(tmp_path, "s1", options=SessionOptions(files=files))
    for index, node_id in enumerate(["u1", "a1", "u2"]):
        core.append({"id": node_id, "role": ("user", "assistant")[index % 2],
                     "content": f"turn {node_id}"})
    return SessionClaims(core, files if files is not None else DurableFiles())


def claims_of(core: SessionCore) -> SessionClaims:
    return SessionClaims(core, DurableFiles())


def claim_on_disk(tmp_path: Path) -> Claim | None:
    return decode_claim((tmp_path / "sessions" / "s1" / CLAIM_NAME).read_bytes())


# -- the pure rules --------------------------------------------------------------------

claims = st.builds(
    Claim,
    owner=st.text(min_size=1, max_size=12),
    pid=st.integers(min_value=1, max_value=2**31),
    host=st.text(max_size=12),
    nodes=st.lists(st.text(max_size=8), max_size=5).map(tuple),
    expires=st.floats(allow_nan=False, allow_infinity=False),
)


@given(claims)
def test_a_claim_round_trips(claim: Claim) -> None:
    assert decode_claim(encode_claim(claim)) == claim


@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_claim_or_none(data: bytes) -> None:
    assert decode_claim(data) is None or isinstance(decode_claim(data), Claim)


@pytest.mark.parametrize("data", [
    b"", b"{}\n", b"[]", b'{"owner": "r-1", "pid": 1, "host": "h", "nodes": [], "exp',
    b'{"owner": "", "pid": 1, "host": "h", "nodes": [], "expires": 1}',
    b'{"owner": "r-1", "pid": true, "host": "h", "nodes": [], "expires": 1}',
    b'{"owner": "r-1", "pid": 0, "host": "h", "nodes": [], "expires": 1}',
    b'{"owner": "r-1", "pid": 1, "host": 3, "nodes": [], "expires": 1}',
    b'{"owner": "r-1", "pid": 1, "host": "h", "nodes": [1], "expires": 1}',
    b'{"owner": "r-1", "pid": 1, "host": "h", "nodes": [], "expires": "soon"}',
    b'{"owner": "r-1", "pid": 1, "host": "h", "nodes": [], "expires": 1e999}',
])
def test_a_malformed_claim_is_no_claim(data: bytes) -> None:
    assert decode_claim(data) is None


def test_liveness_expiry_and_pid() -> None:
    claim = Claim("r-a", 4242, HOST, ("u1",), expires=100.0)

    def alive(pid: int) -> bool:
        return True

    def dead(pid: int) -> bool:
        return False

    assert claim.live(99.9, host=HOST, alive=alive)
    assert not claim.live(100.0, host=HOST, alive=alive)  # the lease ran out
    assert not claim.live(50.0, host=HOST, alive=dead)  # its process is gone
    assert claim.live(50.0, host="elsewhere", alive=dead)  # another host's pid says nothing
    assert not claim.live(100.0, host="elsewhere", alive=dead)


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())


# -- SessionClaims: claim, release, expiry, dead pid ----------------------------------------


def test_another_owner_waits_until_the_claim_is_released(tmp_path: Path) -> None:
    claims = session(tmp_path)
    assert claims.claim_batch(["u1", "a1"], "r-a", now=1000.0, lease=60.0)
    assert claim_on_disk(tmp_path) == Claim("r-a", os.getpid(), claims.file.host,
                                            ("u1", "a1"), 1060.0)
    assert not claims.claim_batch(["u1"], "r-b", now=1001.0, lease=60.0)
    assert claim_on_disk(tmp_path).owner == "r-a"  # type: ignore[union-attr]  # refused: unchanged
    assert claims.claim_batch(["u2"], "r-a", now=1002.0, lease=60.0)  # the owner renews
    assert claim_on_disk(tmp_path).nodes == ("u2",)  # type: ignore[union-attr]
    assert not claims.release("r-b")  # not the holder: left alone
    assert claim_on_disk(tmp_path) is not None
    assert claims.release("r-a")
    assert claim_on_disk(tmp_path) is None
    assert not claims.release("r-a")
    assert claims.claim_batch(["u1"], "r-b", now=1003.0, lease=60.0)


def test_an_expired_claim_is_void(tmp_path: Path) -> None:
    claims = session(tmp_path)
    assert claims.claim_batch(["u1"], "r-a", now=1000.0, lease=10.0)
    assert not claims.claim_batch(["u1"], "r-b", now=1009.9, lease=10.0)
    assert claims.claim_batch(["u1"], "r-b", now=1010.0, lease=10.0)
    assert claim_on_disk(tmp_path).owner == "r-b"  # type: ignore[union-attr]


def test_a_claim_of_a_dead_process_on_this_host_is_void(tmp_path: Path) -> None:
    claims = session(tmp_path)
    path = tmp_path / "sessions" / "s1" / CLAIM_NAME
    for pid, host, blocks in [(dead_pid(), claims.file.host, False),
                              (dead_pid(), "another-host", True),
                              (os.getpid(), claims.file.host, True)]:
        path.write_bytes(encode_claim(Claim("r-a", pid, host, ("u1",), 1e12)))
        assert (claims.holder("r-b", 1000.0) is not None) is blocks
        assert claims.claim_batch(["u1"], "r-b", now=1000.0, lease=10.0) is not blocks


def test_a_malformed_claim_file_blocks_nobody(tmp_path: Path) -> None:
    claims = session(tmp_path)
    (tmp_path / "sessions" / "s1" / CLAIM_NAME).write_bytes(b'{"owner": "r-a", "pi')
    assert claims.holder("r-b", 1000.0) is None
    assert claims.claim_batch(["u1"], "r-b", now=1000.0, lease=10.0)


def test_claim_holder_is_the_hint_other_owners_read(tmp_path: Path) -> None:
    claims = session(tmp_path)
    other = claims_of(SessionCore.open(tmp_path, "s1"))
    assert other.holder("r-b", 1000.0) is None
    assert claims.claim_batch(["u1", "a1"], "r-a", now=1000.0, lease=10.0)
    holder = other.holder("r-b", 1000.0)
    assert holder is not None and holder.nodes == ("u1", "a1")
    assert other.holder("r-a", 1000.0) is None  # one's own claim blocks nothing
    assert other.holder("r-b", 1010.0) is None  # expired
    claims.release("r-a")
    assert other.holder("r-b", 1000.0) is None


def test_a_claim_brings_the_index_up_to_date(tmp_path: Path) -> None:
    """What the caller confirms its batch on: writes made before the claim are in the index."""
    claims = session(tmp_path)
    core = claims.core
    other = SessionCore.open(tmp_path, "s1")
    other.merge_node_metadata_batch({"u1": {"marker": "w-1"}})  # another runtime's markers
    with core.trusting_index():  # reads skip their own freshness check in here
        assert "marker" not in core.node("u1").metadata
        assert claims.claim_batch(["u1"], "r-a", now=1000.0, lease=10.0)
        assert core.node("u1").metadata["marker"] == "w-1"


def test_claims_never_fsync_and_refuse_bad_input(tmp_path: Path) -> None:
    files = FaultyFiles()
    claims = session(tmp_path, files)
    files.steps.clear()
    assert claims.claim_batch(["u1"], "r-a", now=1000.0, lease=10.0)
    assert claims.release("r-a")
    assert files.steps and not [s for s, _ in files.steps if s == "fsync"]
    with pytest.raises(UnsafeIdError):
        claims.claim_batch(["../u1"], "r-a", now=1000.0, lease=10.0)
    for lease in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            claims.claim_batch(["u1"], "r-a", now=1000.0, lease=lease)
    assert claim_on_disk(tmp_path) is None


def test_release_claim_without_opening_the_session(tmp_path: Path) -> None:
    claims = session(tmp_path)
    assert claims.claim_batch(["u1"], "r-a", now=1000.0, lease=10.0)
    assert not release_claim(tmp_path, "s1", "r-b", DurableFiles())
    assert release_claim(tmp_path, "s1", "r-a", DurableFiles())
    assert claim_on_disk(tmp_path) is None
    assert not release_claim(tmp_path, "missing", "r-a", DurableFiles())


def test_claim_file_with_injected_host_and_pid(tmp_path: Path) -> None:
    directory = str(tmp_path)
    mine = ClaimFile(directory, DurableFiles(), host="h1", pid=11, alive=lambda pid: pid != 11)
    theirs = ClaimFile(directory, DurableFiles(), host="h1", pid=22, alive=lambda pid: pid != 11)
    assert mine.take("r-a", ["u1"], now=0.0, lease=10.0)
    assert theirs.take("r-b", ["u1"], now=1.0, lease=10.0)  # r-a's pid 11 is dead on h1
    assert not mine.take("r-a", ["u1"], now=2.0, lease=10.0)  # pid 22 lives
