"""The states the inspector's tests look at, and the tools to look and to check nothing changed.

- the reference agent's sample state (``shared/fixtures/openprogram-sample``),
  copied with write bits, so a write the inspector made would succeed and be seen;
- a LoCoMo conversation (``shared/datasets/locomo-dev``, read in place, never
  copied into the project) imported through ``import_jsonl``, written to memory,
  then given hostile turns: a ``<script>``, a ``javascript:`` link (both
  written to memory, so topics hold them too), a fork, and a 1 MB line left owed.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio

from memory.runtime import import_jsonl, open_runtime
from store import SessionCore
from tests.fixture import FIXTURE, copy_fixture

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
from _locomo import load_conversations  # bench/ is a directory of scripts

__all__ = ["DATA", "FIXTURE", "LOCOMO_SESSION", "LONG", "PWN", "digest", "locomo_state",
           "run_apart", "sample_state"]

T = TypeVar("T")

DATA = ROOT.parent / "shared" / "datasets" / "locomo-dev"
LOCOMO_SESSION = "locomo-conv-26"
PWN = "<script>window.pwned=1</script>"
JS_LINK = "[click me](javascript:window.pwned=2) and <img src=x onerror=window.pwned=3>"
LONG = "A" * 1_000_000


def sample_state(tmp: Path) -> Path:
    return copy_fixture(tmp / "sample")


def locomo_state(tmp: Path, sessions: int = 2) -> Path:
    state = tmp / "locomo"
    [conversation] = load_conversations(DATA, ["conv-26"])
    source = conversation.sliced(sessions).write_jsonl(tmp / "conv-26.jsonl")

    async def build() -> str:
        async with open_runtime(state) as rt:
            await import_jsonl(rt, source, session=LOCOMO_SESSION)
            branch = await rt.sessions.get_branch(LOCOMO_SESSION)
            await rt.sessions.append(LOCOMO_SESSION, {"role": "user", "content": PWN})
            await rt.sessions.append(LOCOMO_SESSION, {"role": "assistant", "content": JS_LINK})
            await rt.flush(LOCOMO_SESSION)
            return str(branch[len(branch) // 2]["id"])

    middle = run_apart(build)
    # a fork from a turn in the middle: a second branch, owed (no runtime: nothing writes it)
    core = SessionCore.open(state, LOCOMO_SESSION)
    core.set_head(middle)
    core.append({"role": "user", "content": "A re-ask."})
    core.append({"role": "user", "content": LONG})
    core.close()
    return state


def run_apart(body: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(body)`` in a thread of its own: Playwright's sync API keeps a loop in this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, body).result()


def digest(state: Path) -> dict[str, str]:
    """Every file and directory under ``state`` (hidden ones too): its content's hash or "dir"."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(state):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), state)] = "dir"
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, state)] = hashlib.sha256(
                Path(path).read_bytes()).hexdigest()
    return found
