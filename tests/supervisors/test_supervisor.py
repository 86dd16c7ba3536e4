"""Static supervisors: strategies, restart types, intensity, backoff, shutdown, trees."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import pytest

from actors import (
    Actor,
    ActorCrashedError,
    ActorRef,
    Idempotent,
    MailboxOptions,
    StopReason,
    open_actor,
    snapshot,
)
from actors.lowlevel import ActorState
from supervisors import (
    Backoff,
    ChildSpec,
    DuplicateChildError,
    Intensity,
    Restart,
    RestartIntensityExceededError,
    Strategy,
    Supervisor,
    SupervisorMessage,
    SupervisorStatistics,
    delete_child,
    get_child,
    restart_child,
    start_child,
    terminate_child,
    which_children,
)


@dataclass
class Journal:
    events: list[tuple[str, str]] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)
    hang_on_stop: set[str] = field(default_factory=set)
    started: anyio.Event | None = None  # set by every start, for a test waiting on one


@dataclass(frozen=True, slots=True)
class Crash(Idempotent):
    """A crash request the kernel delivers again after each crash, up to its poison threshold."""


class Probe(Actor[object]):
    """Crashes on "crash", replies to anything else, records its lifecycle."""

    def __init__(self, name: str, journal: Journal) -> None:
        self.name = name
        self.journal = journal

    async def on_start(self) -> None:
        self.journal.starts[self.name] = self.journal.starts.get(self.name, 0) + 1
        self.journal.events.append(("start", self.name))
        if self.journal.started is not None:
            self.journal.started.set()

    async def handle(self, message: Any) -> Any:
        if message == "crash" or isinstance(message, Crash):
            raise RuntimeError(f"{self.name} crashed")
        return (self.name, message)

    async def on_stop(self, reason: StopReason) -> None:
        self.journal.events.append(("stop", self.name))
        if self.name in self.journal.hang_on_stop:
            await anyio.sleep_forever()


def spec(name: str, journal: Journal, restart: Restart = Restart.PERMANENT,
         poison_threshold: int = 1, **kw: Any) -> ChildSpec[object]:
    # poison_threshold=1: a crashing message is set aside at once, so one
    # injected crash is exactly one restart.
    options = MailboxOptions(poison_threshold=poison_threshold)
    return ChildSpec(name, lambda: Probe(name, journal), restart, options=options, **kw)


async def child(sup: ActorRef[SupervisorMessage], name: str) -> ActorRef[object]:
    # By id the supervisor knows no message type; every child here is a Probe.
    return cast("ActorRef[object]", await get_child(sup, name))


async def crash(sup: ActorRef[SupervisorMessage], name: str) -> None:
    await (await child(sup, name)).cast("crash")
    await anyio.wait_all_tasks_blocked()


def three(journal: Journal) -> list[ChildSpec[object]]:
    return [spec(n, journal) for n in ("a", "b", "c")]


@pytest.mark.parametrize(
    ("strategy", "restarted"),
    [
        (Strategy.ONE_FOR_ONE, {"b"}),
        (Strategy.ONE_FOR_ALL, {"a", "b", "c"}),
        (Strategy.REST_FOR_ONE, {"b", "c"}),
    ],
)
async def test_strategy_decides_which_children_restart(
    strategy: Strategy, restarted: set[str]
) -> None:
    journal = Journal()
    sup_actor = Supervisor(three(journal), strategy=strategy, backoff=Backoff.none())
    async with open_actor(sup_actor, name="sup") as sup:
        await anyio.wait_all_tasks_blocked()
        assert journal.events == [("start", "a"), ("start", "b"), ("start", "c")]
        journal.events.clear()
        await crash(sup, "b")
        assert journal.starts == {n: 1 + (n in restarted) for n in "abc"}
        stopped = [n for kind, n in journal.events if kind == "stop"]
        started = [n for kind, n in journal.events if kind == "start"]
        # The crashed child stops first, then its siblings latest-first;
        # everything restarts in start order.
        assert stopped == ["b", *sorted(restarted - {"b"}, reverse=True)]
        assert started == sorted(restarted)
        for n in "abc":
            assert await (await child(sup, n)).call("ping") == (n, "ping")


async def test_restart_types_permanent_transient_temporary() -> None:
    journal = Journal()
    specs = [
        spec("p", journal, Restart.PERMANENT),
        spec("t", journal, Restart.TRANSIENT),
        spec("x", journal, Restart.TEMPORARY),
    ]
    async with open_actor(Supervisor(specs, backoff=Backoff.none()), name="sup") as sup:
        refs = {n: await child(sup, n) for n in "ptx"}
        for n in "ptx":
            await refs[n].cast("crash")
        await anyio.wait_all_tasks_blocked()
        assert journal.starts == {"p": 2, "t": 2, "x": 1}
        assert [info.id for info in await which_children(sup)] == ["p", "t"]
        for n in "pt":
            await refs[n].stop()  # a normal exit
        await anyio.wait_all_tasks_blocked()
        assert journal.starts == {"p": 3, "t": 2, "x": 1}
        states = {i.id: i.state for i in await which_children(sup)}
        assert states == {"p": ActorState.RUNNING, "t": ActorState.STOPPED}


@pytest.mark.virtual_time
async def test_beyond_the_intensity_the_tree_stops_in_reverse_order_and_fails_upward() -> None:
    journal = Journal()
    sup_actor = Supervisor(three(journal), intensity=Intensity(5, 10.0), backoff=Backoff.none())
    with pytest.raises(RestartIntensityExceededError, match="'sup' gave up: child 'b'") as raised:
        async with open_actor(sup_actor, name="sup") as sup:
            for _ in range(5):
                await crash(sup, "b")
                await anyio.sleep(1.0)
            journal.events.clear()
            await crash(sup, "b")  # the sixth restart within 10 s
            await anyio.sleep_forever()
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "b crashed"
    assert journal.events == [("stop", "b"), ("stop", "c"), ("stop", "a")]


@pytest.mark.virtual_time
async def test_crashes_spread_wider_than_the_window_never_escalate() -> None:
    journal = Journal()
    sup_actor = Supervisor(three(journal), intensity=Intensity(2, 10.0), backoff=Backoff.none())
    async with open_actor(sup_actor, name="sup") as sup:
        for _ in range(6):
            await crash(sup, "a")
            await anyio.sleep(5.1)
        assert journal.starts["a"] == 7


@pytest.mark.virtual_time
async def test_backoff_delays_restarts_without_blocking_the_supervisor() -> None:
    journal = Journal()
    policy = Backoff(initial=1.0, factor=2.0, maximum=60.0, jitter=0.0, reset_after=100.0)
    sup_actor = Supervisor(
        [spec("a", journal)], intensity=Intensity(10, 1000.0), backoff=policy, rng=random.Random(0)
    )
    restart_times: list[float] = []
    async with open_actor(sup_actor, name="sup") as sup:
        a = await child(sup, "a")
        for _ in range(4):
            crashed_at = anyio.current_time()
            journal.started = anyio.Event()
            await a.cast("crash")
            # The supervisor answers while the restart waits out its backoff.
            infos = await which_children(sup)
            assert infos[0].state in (ActorState.RUNNING, ActorState.RESTARTING)
            await journal.started.wait()
            restart_times.append(anyio.current_time() - crashed_at)
        # Calls sent during the backoff wait are queued and answered (same cell).
        await a.cast("crash")
        assert await a.call("queued") == ("a", "queued")
    assert restart_times == [0.0, 1.0, 2.0, 4.0]


@pytest.mark.virtual_time
async def test_shutdown_gives_each_child_its_timeout_then_cancels_it() -> None:
    journal = Journal(hang_on_stop={"b"})
    specs = [spec("a", journal), spec("b", journal, shutdown_timeout=3.0), spec("c", journal)]
    threads_before = threading.active_count()
    async with open_actor(Supervisor(specs), name="sup", shutdown_timeout=60.0) as sup:
        await anyio.wait_all_tasks_blocked()
        start = anyio.current_time()
    assert anyio.current_time() - start == pytest.approx(3.0, abs=0.01)
    assert [n for kind, n in journal.events if kind == "stop"] == ["c", "b", "a"]
    assert sup.statistics().state is ActorState.STOPPED
    assert threading.active_count() == threads_before


async def test_no_task_outlives_the_tree() -> None:
    journal = Journal()
    inner = Supervisor(three(journal), strategy=Strategy.ONE_FOR_ALL, backoff=Backoff.none())
    outer = Supervisor([ChildSpec("inner", lambda: inner), spec("d", journal)])
    before = len(anyio.get_running_tasks())
    async with open_actor(outer, name="root") as root:
        await anyio.wait_all_tasks_blocked()
        assert len(anyio.get_running_tasks()) > before
    assert len(anyio.get_running_tasks()) == before
    assert all(c.state is ActorState.STOPPED for c in _cells(snapshot(root)))


def _cells(tree: Any) -> list[Any]:
    return list(tree.walk())


@pytest.mark.virtual_time
async def test_a_child_supervisor_that_gives_up_is_a_crashed_child_of_its_parent() -> None:
    journal = Journal()

    def inner() -> Supervisor:
        return Supervisor([spec("leaf", journal)], intensity=Intensity(1), backoff=Backoff.none())

    outer = Supervisor([ChildSpec("inner", inner)], backoff=Backoff.none())
    async with open_actor(outer, name="root") as root:
        inner_ref = await child(root, "inner")
        await crash(inner_ref, "leaf")  # restart 1: allowed
        await crash(inner_ref, "leaf")  # restart 2: inner gives up, root restarts inner
        assert journal.starts["leaf"] == 3  # fresh leaf under the fresh inner supervisor
        tree = snapshot(root)
        assert tree.render().splitlines() == [
            "root (Supervisor) running mailbox=0 restarts=0",
            "  inner (Supervisor) running mailbox=0 restarts=1",
            "    leaf (Probe) running mailbox=0 restarts=0",
        ]
        assert root.cell.actor is not None


async def test_management_calls_and_their_typed_errors() -> None:
    journal = Journal()
    async with open_actor(Supervisor([spec("a", journal)]), name="sup") as sup:
        b = await start_child(sup, spec("b", journal))
        assert await b.call("hi") == ("b", "hi")
        with pytest.raises(DuplicateChildError, match="already has a child 'b'"):
            await start_child(sup, spec("b", journal))
        await terminate_child(sup, "b")
        assert b.statistics().state is ActorState.STOPPED
        await restart_child(sup, "b")
        assert await b.call("again") == ("b", "again")  # the same reference
        await terminate_child(sup, "b")
        await delete_child(sup, "b")
        assert [i.id for i in await which_children(sup)] == ["a"]
        with pytest.raises(LookupError, match="has no child 'b'"):
            await get_child(sup, "b")
        assert sup.statistics().crashes == 0  # bad calls never crash the supervisor
        stats = await sup.inspect()
        assert isinstance(stats, SupervisorStatistics)
        assert (stats.state, [c.id for c in stats.children]) == (ActorState.RUNNING, ["a"])


async def test_poison_messages_reach_the_supervisors_dead_letter_hook() -> None:
    journal = Journal()
    dead: list[tuple[Any, BaseException]] = []
    probe_spec = ChildSpec("a", lambda: Probe("a", journal))  # supervisor's threshold: 3
    sup_actor = Supervisor(
        [probe_spec],
        backoff=Backoff.none(),
        options=MailboxOptions(
            poison_threshold=3, dead_letter=lambda message, exc: dead.append((message, exc))
        ),
    )
    async with open_actor(sup_actor, name="sup") as sup:
        a = await child(sup, "a")
        with pytest.raises(Exception, match="crashed actor 'sup/a' 3 times") as raised:
            await a.call(Crash())
        assert await a.call("after") == ("a", "after")
    assert [m for m, _ in dead] == [Crash()]
    assert raised.value.__cause__ is dead[0][1]
    assert journal.starts["a"] == 4


async def test_a_temporary_childs_caller_gets_the_crash() -> None:
    journal = Journal()
    specs = [spec("x", journal, Restart.TEMPORARY, poison_threshold=3)]
    async with open_actor(Supervisor(specs), name="sup") as sup:
        x = await child(sup, "x")
        with pytest.raises(ActorCrashedError) as raised:
            await x.call("crash")
        assert str(raised.value.__cause__) == "x crashed"
