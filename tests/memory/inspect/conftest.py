"""One headless Chromium for the inspector's browser tests, and servers over test states.

Debian's ``chromium`` driven by Playwright through ``executable_path`` (never
``playwright install``). Locally, without chromium, the browser tests skip;
in CI (``CI`` set) they fail instead: ``.ci/run`` installs chromium first.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from memory.inspect import InspectorServer, StateMemory, inspector_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-background-networking"]


def need_chromium() -> None:
    """Skip without chromium, locally; in CI, fail: the browser tests must run there."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed here (apt-get install chromium)")


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@contextmanager
def _serving(state: Path, **options: Any) -> Iterator[str]:
    memory = StateMemory(str(state))
    app = inspector_app(str(state), memory, hosts=["127.0.0.1", "localhost"], **options)
    with InspectorServer(app, "127.0.0.1", 0) as server:
        yield server.url.rstrip("/")
    memory.close()


@pytest.fixture(scope="module")
def serve() -> Callable[..., AbstractContextManager[str]]:
    """``with serve(state) as base:`` the inspector over ``state`` at ``base`` (no trailing /)."""
    return _serving
