"""``run --inspect``'s live side: the runtime page shows the running tree, memory asks the runtime.

The runtime runs on this test's loop (asyncio or trio); the server on its
own, in its thread; the browser in a worker thread (Playwright's sync API
keeps its own loop), so the runtime's loop stays free to answer the calls
the server makes through the portal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from memory.inspect import InspectorServer, LiveRuntime, inspector_app
from memory.runtime import RuntimeConfig, open_runtime
from tests.memory.cli._states import owing_state
from tests.memory.inspect.conftest import launch, need_chromium

QUESTION = "green tea"


def _browse(base: str) -> dict[str, Any]:
    """What the runtime and memory pages show, in a browser of this thread's own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(base + "/runtime")
        page.wait_for_function("document.querySelectorAll('#tree tbody tr').length > 3")
        page.wait_for_function("document.getElementById('written_jobs').textContent !== '-'")
        page.wait_for_function("document.querySelectorAll('#chart polyline').length == 2")
        seen = {"tree": page.locator("#tree tbody").inner_text(),
                "written": page.locator("#written_jobs").inner_text(),
                "cycles": page.locator("#cycles tbody").inner_text()}
        if shots := os.environ.get("SCRIPTORIUM_SCREENSHOTS"):
            page.screenshot(path=os.path.join(shots, "runtime.png"))
        page.goto(f"{base}/memory?q={quote(QUESTION)}&k=3&budget=200")
        seen["hits"] = [(li.get_attribute("data-score"), li.locator("a").first.inner_text())
                        for li in page.locator("#hits li.hit").all()]
        seen["context"] = page.locator("#context").inner_text()
        seen["errors"] = errors
        browser.close()
    return seen


async def test_the_runtime_page_shows_the_live_tree_and_memory_asks_rt(tmp_path: Path) -> None:
    need_chromium()
    state = owing_state(tmp_path)
    live = LiveRuntime(interval=0.05)
    async with (open_runtime(state, config=RuntimeConfig(on_event=live.on_event)) as rt,
                anyio.create_task_group() as tg):
        tg.start_soon(live.sample_forever, rt)
        await rt.flush("demo")  # one write cycle, for the counters and the cycles table
        while not live.running:
            await anyio.sleep(0.01)
        server = InspectorServer(inspector_app(str(state), live, live=live))
        base = (await anyio.to_thread.run_sync(server.start)).rstrip("/")
        try:
            document = await anyio.to_thread.run_sync(
                lambda: httpx.get(base + "/runtime.json").json())
            seen = await anyio.to_thread.run_sync(_browse, base)
        finally:
            await anyio.to_thread.run_sync(server.stop)
        hits = await rt.recall(QUESTION, k=3)
        context = await rt.context(QUESTION, budget_tokens=200)
        tg.cancel_scope.cancel()
    assert document["running"] and document["tree"]["id"] == "runtime"
    for actor in ("workspace", "sessions", "writers", "writer-0", "watchdog", "demo"):
        assert actor in seen["tree"], seen["tree"]
    assert int(seen["written"]) >= 1 and "written" in seen["cycles"]
    assert seen["hits"] == [(str(h.score), h.file if h.kind == "topic"
                             else f"{h.session}/{h.node_id}") for h in hits]
    assert seen["context"] == context.text
    assert not seen["errors"]
