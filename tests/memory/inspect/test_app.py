"""The inspector in a real browser: every page loads clean, turns open, recall is rt's, nothing runs.

Headless Chromium (Debian's, through Playwright) over the reference agent's
sample state and a LoCoMo conversation imported and written to memory with
hostile turns in it. Read-only is checked from outside: every route answers
POST/PUT/DELETE with 405, and a full crawl leaves every file of the state
as it was (by digest; the states are writable copies, so a write would land).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from memory.inspect._state import read_session
from memory.runtime import open_runtime
from tests.memory.inspect._states import (
    DATA,
    FIXTURE,
    LOCOMO_SESSION,
    LONG,
    PWN,
    digest,
    locomo_state,
    run_apart,
    sample_state,
)

Serve = Callable[..., AbstractContextManager[str]]
# SCRIPTORIUM_SCREENSHOTS=docs/inspector keeps the pages' screenshots for the README.
SHOTS = os.environ.get("SCRIPTORIUM_SCREENSHOTS")
QUESTION = "What did Caroline research?"


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    for needed in (FIXTURE, DATA):
        if not needed.is_dir():
            if os.environ.get("CI"):
                pytest.fail(f"{needed} is missing: CI lays shared/ beside the clone")
            pytest.skip(f"{needed} is not there")
    tmp = tmp_path_factory.mktemp("inspect")
    return {"sample": sample_state(tmp), "locomo": locomo_state(tmp)}


@pytest.fixture(scope="module")
def bases(states: dict[str, Path], serve: Serve) -> Iterator[dict[str, str]]:
    with serve(states["sample"]) as sample, serve(states["locomo"]) as locomo:
        yield {"sample": sample, "locomo": locomo}


def _sessions(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "sessions").iterdir() if (p / "meta.json").is_file())


def pages(state: Path, every_turn: bool = False) -> list[str]:
    """The paths of a state's pages: every session's, one turn each (or every turn)."""
    found = ["/", "/memory", f"/memory?q={quote(QUESTION)}&k=5&budget=300", "/runtime"]
    for sid in _sessions(state):
        view = read_session(str(state), sid)
        found.append(f"/session/{quote(sid)}")
        turns = view.turns if every_turn else view.turns[:1]
        found += [f"/session/{quote(sid)}/turn/{quote(t.node.id)}" for t in turns]
    return found


class Watched:
    """A page and the console errors and uncaught exceptions it reported."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, url: str) -> Any:
        answer = self.page.goto(url)
        assert answer is not None and answer.status == 200, url
        self.page.wait_for_load_state("load")
        assert not self.errors, f"{url}: {self.errors}"
        return self.page


def _shot(page: Any, name: str, tmp: Path) -> None:
    folder = Path(SHOTS) if SHOTS else tmp
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=False)


@pytest.mark.parametrize("which", ["sample", "locomo"])
def test_every_page_loads_without_a_console_error(
    which: str, browser: Any, states: dict[str, Path], bases: dict[str, str], tmp_path: Path,
) -> None:
    watched = Watched(browser)
    for path in pages(states[which]):
        page = watched.open(bases[which] + path)
        assert page.locator("header.top nav a").count() == 3
        assert page.evaluate("window.pwned") is None
    if which == "locomo":  # the README's pictures: the conversation has every kind of turn
        for name, path in (("overview", "/"), ("session", f"/session/{LOCOMO_SESSION}"),
                           ("memory", f"/memory?q={quote(QUESTION)}&k=5&budget=300")):
            _shot(watched.open(bases[which] + path), name, tmp_path)
    watched.page.close()


def test_clicking_a_turn_shows_its_detail(
    browser: Any, states: dict[str, Path], bases: dict[str, str], tmp_path: Path,
) -> None:
    watched = Watched(browser)
    page = watched.open(f"{bases['locomo']}/session/{LOCOMO_SESSION}")
    view = read_session(str(states["locomo"]), LOCOMO_SESSION)
    written = next(t for t in view.turns if t.status == "written")
    page.click(f'a.turn[data-turn="{written.node.id}"]')
    detail = page.locator("#panel #turn-detail")
    detail.wait_for()
    assert detail.get_attribute("data-turn") == written.node.id
    assert written.node.output.strip() in detail.locator("pre.content").first.inner_text()
    assert detail.locator(".badge").inner_text() == "written"
    assert page.locator(f'a.turn.selected[data-turn="{written.node.id}"]').count() == 1
    # written, so archived: its frame, and the paragraphs that cite it
    assert written.node.output.strip() in detail.inner_text().split("Archive frame", 1)[1]
    assert detail.locator("blockquote").count() >= 1
    assert not watched.errors
    if SHOTS:  # the README's picture: an owed turn of the fork, its detail open
        owed = page.locator("svg.dag a.turn.owed").first
        owed.scroll_into_view_if_needed()
        owed.click()
        page.wait_for_selector("#panel .badge.owed")
        _shot(page, "turn", tmp_path)
    # every status the legend names is counted, and the fork drew an elbow
    assert page.locator("svg.dag path.edge.fork").count() >= 1
    assert page.locator("svg.dag a.turn.owed").count() >= 2
    assert page.locator("svg.dag a.turn.head circle.ring").count() == 1
    watched.page.close()


def test_search_and_context_are_what_rt_recall_and_rt_context_return(
    browser: Any, states: dict[str, Path], bases: dict[str, str], tmp_path: Path,
) -> None:
    watched = Watched(browser)
    page = watched.open(f"{bases['locomo']}/memory")
    page.fill("#q", QUESTION)
    page.fill("#k", "5")
    page.fill("#budget", "300")
    page.click("form#ask button")
    page.wait_for_selector("#context")
    shown = [(li.get_attribute("data-score"), li.locator("a").first.inner_text())
             for li in page.locator("#hits li.hit").all()]
    block = page.locator("#context").inner_text()
    page.click("a.on-session")  # the quoted turns, highlighted on their session
    page.wait_for_selector("svg.dag")
    highlighted = {a.get_attribute("data-turn") for a in page.locator("a.turn.quoted").all()}
    assert not watched.errors
    watched.page.close()

    copy = tmp_path / "copy"  # rt on a copy: a runtime writes its index, the state stays as it is
    shutil.copytree(states["locomo"], copy)

    async def ask() -> tuple[list[Any], Any]:
        async with open_runtime(copy) as rt:
            return (await rt.recall(QUESTION, k=5),
                    await rt.context(QUESTION, budget_tokens=300))

    hits, context = run_apart(ask)
    assert hits, "the question must find something for the comparison to mean anything"
    expected = [(str(h.score), h.file if h.kind == "topic" else f"{h.session}/{h.node_id}")
                for h in hits]
    assert shown == expected
    assert block == context.text
    assert highlighted == {node for _, node in context.quoted}


def test_hostile_text_is_shown_as_text_and_never_runs(
    browser: Any, states: dict[str, Path], bases: dict[str, str],
) -> None:
    view = read_session(str(states["locomo"]), LOCOMO_SESSION)
    pwn = next(t for t in view.turns if t.node.output == PWN)
    long = next(t for t in view.turns if t.node.output == LONG)
    base = bases["locomo"]
    watched = Watched(browser)
    page = watched.open(f"{base}/session/{LOCOMO_SESSION}/turn/{pwn.node.id}")
    assert page.locator("pre.content").first.inner_text() == PWN
    page = watched.open(f"{base}/session/{LOCOMO_SESSION}")
    page.click(f'a.turn[data-turn="{pwn.node.id}"]')  # the panel's innerHTML too
    page.locator("#panel #turn-detail").wait_for()
    assert PWN in page.locator("#panel pre.content").first.inner_text()
    for path in ("/", "/memory", f"/memory?q={quote('pwned click')}"):
        page = watched.open(base + path)
        assert page.locator('a[href^="javascript:"], [onerror], script:not([src])').count() == 0
    assert "window.pwned=1" in page.locator("body").inner_text()  # written: memory quotes it
    page = watched.open(f"{base}/session/{LOCOMO_SESSION}/turn/{long.node.id}")
    assert "more characters not shown" in page.locator("pre.content").first.inner_text()
    assert page.evaluate("window.pwned") is None
    watched.page.close()
    weight = len(httpx.get(f"{base}/session/{LOCOMO_SESSION}/turn/{long.node.id}").content)
    assert weight < 300_000, "a 1 MB line is cut, not sent whole"


def test_every_route_answers_writes_with_405(
    states: dict[str, Path], bases: dict[str, str],
) -> None:
    for which, state in states.items():
        for path in [*pages(state), "/runtime.json", "/static/inspect.css", "/static/inspect.js"]:
            for method in ("POST", "PUT", "DELETE"):
                answer = httpx.request(method, bases[which] + path)
                assert answer.status_code == 405, (method, path, answer.status_code)


def crawl(base: str, start: list[str]) -> set[str]:
    """Every path reachable from ``start`` by the pages' links (and each turn's panel fragment)."""
    seen: set[str] = set()
    queue = list(start)
    with httpx.Client(base_url=base) as client:
        while queue:
            path = queue.pop()
            if path in seen:
                continue
            seen.add(path)
            answer = client.get(path)
            assert answer.status_code == 200, path
            if "/turn/" in path and "?" not in path:
                queue.append(path + "?part=1")
            if answer.headers["content-type"].startswith("text/html"):
                queue += [link.replace("&amp;", "&")
                          for link in re.findall(r'(?:href|src)="(/[^"#]*)"', answer.text)]
    return seen


def test_a_full_crawl_changes_no_file_of_the_state(
    browser: Any, states: dict[str, Path], bases: dict[str, str],
) -> None:
    before = {which: digest(state) for which, state in states.items()}
    watched = Watched(browser)
    for which, state in states.items():
        crawled = crawl(bases[which], pages(state))
        assert set(pages(state, every_turn=True)) <= crawled  # every turn was reached
        for path in pages(state)[:4]:
            watched.open(bases[which] + path)
    watched.page.close()
    assert {which: digest(state) for which, state in states.items()} == before
