"""Test configuration shared by every package's tests.

Every async test runs on asyncio and on trio. The backends are listed
explicitly rather than left to anyio's default, which silently drops trio
when it is not installed.

Tests marked ``@pytest.mark.virtual_time`` run both backends on a virtual
clock (trio's ``MockClock`` with autojump; ``VirtualTimeEventLoop`` on
asyncio), so a test of a 10-second intensity window or a 300-second watchdog
poll takes no real time. ``virtual_time(wait_for_threads=True)``: the clock
does not jump while a worker thread is doing real work (disk writes under a
timeout); ``virtual_time(cushion=s)`` waits ``s`` real seconds for I/O before
a jump, where that is what a test needs (see ``tests/_virtual_time.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests._virtual_time import VirtualTimeEventLoop, WorkerThreads, trio_clock

BACKENDS = ("asyncio", "trio")


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    marker = request.node.get_closest_marker("virtual_time")
    if marker is None:
        return request.param
    cushion = float(marker.kwargs.get("cushion", 0.0))
    threads: WorkerThreads | None = None
    if marker.kwargs.get("wait_for_threads", False):
        threads = WorkerThreads()
        patches = pytest.MonkeyPatch()  # not the test's: a test may undo its own patches
        request.addfinalizer(patches.undo)
        threads.install(patches)
    if request.param == "trio":
        return ("trio", {"clock": trio_clock(threads, cushion)})
    return ("asyncio", {"loop_factory": lambda: VirtualTimeEventLoop(cushion, threads)})
