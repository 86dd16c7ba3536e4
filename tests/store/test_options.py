"""SessionOptions: the five knobs of a session's owner as one checked value, passed whole."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from actors import open_actor
from store import Append, DurableFiles, SessionActor, SessionCore, SessionOptions


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"max_node_bytes": 0}, ValueError, "at least 1"),
        ({"max_node_bytes": 1.5}, TypeError, "whole number"),
        ({"max_node_bytes": True}, TypeError, "whole number"),
        ({"lock_timeout": -1.0}, ValueError, "0 or more seconds, or None"),
        ({"lock_timeout": math.nan}, ValueError, "0 or more seconds"),
        ({"lock_timeout": "5"}, TypeError, "seconds or None"),
        ({"clock": 5.0}, TypeError, "callable"),
    ],
)
def test_a_bad_option_is_refused_when_made_and_when_varied(
    changes: dict[str, object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        SessionOptions(**changes)  # type: ignore[arg-type]
    with pytest.raises(error, match=words):
        dataclasses.replace(SessionOptions(), **changes)  # type: ignore[arg-type]


def test_the_defaults_wait_a_bounded_time_and_share_no_disk_double(tmp_path: Path) -> None:
    options = SessionOptions()
    assert options.lock_timeout is not None and options.lock_timeout > 0 and options.log is None
    first = SessionCore.create(tmp_path, "a")
    second = SessionCore.create(tmp_path, "b")
    assert first._files is not second._files  # files=None: one DurableFiles per session


async def test_a_session_actor_hands_its_options_to_its_core(tmp_path: Path) -> None:
    files = DurableFiles()
    options = SessionOptions(files=files, clock=lambda: 1234.0, max_node_bytes=4096,
                             lock_timeout=0.5)
    SessionCore.create(tmp_path, "s1", options=options).close()
    actor = SessionActor(tmp_path, "s1", options=options)
    async with open_actor(actor) as ref:
        node = await ref.call(Append({"id": "u1", "content": "hi"}))
        core = actor.core
        assert node["timestamp"] == 1234.0 and core._files is files
        assert (core._cap, core._lock.timeout) == (4096, 0.5)
