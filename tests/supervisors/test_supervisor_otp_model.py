"""A Hypothesis state machine drives a real supervisor against a model of OTP.

The model is a few lines of pure Python stating OTP's rules: which
children a crash or a normal exit restarts (strategy x restart type), that
temporary children are forgotten, that terminated children stay down until
restarted, and that one restart too many makes the supervisor give up. The
machine applies random crashes, normal stops, terminations and restarts to
a live supervisor and, after each step, compares which children exist,
which run, how often each was started, and whether the supervisor gave up.

No timing is involved: backoff is off and the intensity window is wider
than any run, so every restart counts and the run is deterministic.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import anyio
import anyio.from_thread
from anyio.abc import TaskStatus
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors import Actor, ActorRef, MailboxOptions, open_actor
from actors.lowlevel import ActorState
from supervisors import (
    Backoff,
    ChildSpec,
    Intensity,
    Restart,
    RestartIntensityExceededError,
    Strategy,
    Supervisor,
    SupervisorMessage,
    get_child,
    restart_child,
    start_child,
    terminate_child,
    which_children,
)

MAX_RESTARTS = 4
ONE_CRASH = MailboxOptions(poison_threshold=1)  # one injected crash is one restart


@dataclass
class OtpModel:
    """OTP's supervisor rules, without processes."""

    strategy: Strategy
    restart: dict[str, Restart]  # child id -> restart type, in start order
    alive: dict[str, bool] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    gave_up: bool = False

    def __post_init__(self) -> None:
        for child in self.restart:
            self.alive[child] = True
            self.starts[child] = 1

    def exit(self, child: str, crashed: bool) -> None:
        kind = self.restart[child]
        if not (kind is Restart.PERMANENT or (kind is Restart.TRANSIENT and crashed)):
            self.alive[child] = False
            if kind is Restart.TEMPORARY:
                self._forget(child)
            return
        if self.restarts + 1 > MAX_RESTARTS:
            self.gave_up = True
            return
        self.restarts += 1
        order = list(self.restart)
        if self.strategy is Strategy.ONE_FOR_ONE:
            group = [child]
        elif self.strategy is Strategy.ONE_FOR_ALL:
            group = order
        else:
            group = order[order.index(child) :]
        for member in group:
            if member != child and self.restart[member] is Restart.TEMPORARY:
                self._forget(member)
            else:
                self.alive[member] = True
                self.starts[member] += 1

    def terminate(self, child: str) -> None:
        self.alive[child] = False
        if self.restart[child] is Restart.TEMPORARY:
            self._forget(child)

    def restart_child(self, child: str) -> None:
        self.alive[child] = True
        self.starts[child] += 1

    def start_child(self, child: str, kind: Restart) -> None:
        self.restart[child] = kind
        self.alive[child] = True
        self.starts[child] = 1

    def _forget(self, child: str) -> None:
        del self.restart[child]
        del self.alive[child]


class Counted(Actor[object]):
    def __init__(self, child_id: str, starts: dict[str, int]) -> None:
        self.child_id = child_id
        self.starts = starts

    async def on_start(self) -> None:
        self.starts[self.child_id] = self.starts.get(self.child_id, 0) + 1

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError(f"{self.child_id} crashed")
        return message


class SupervisionMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "asyncio"

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.portal = self.stack.enter_context(
            anyio.from_thread.start_blocking_portal(self.backend)
        )
        self.model: OtpModel | None = None
        self.starts: dict[str, int] = {}
        self.gave_up: BaseException | None = None
        self.root: ActorRef[SupervisorMessage] | None = None
        self.added = 0

    @initialize(
        strategy=st.sampled_from(Strategy),
        kinds=st.lists(st.sampled_from(Restart), min_size=1, max_size=4),
    )
    def start_tree(self, strategy: Strategy, kinds: list[Restart]) -> None:
        restart = {f"c{i}": kind for i, kind in enumerate(kinds)}
        self.model = OtpModel(strategy, dict(restart))
        specs = [
            ChildSpec(cid, self._factory(cid), kind, options=ONE_CRASH)
            for cid, kind in restart.items()
        ]
        supervisor = Supervisor(
            specs,
            strategy=strategy,
            intensity=Intensity(MAX_RESTARTS, 1e9),
            backoff=Backoff.none(),
        )
        future, self.root = self.portal.start_task(self._run_tree, supervisor)
        self.stack.callback(future.cancel)
        self.portal.call(anyio.wait_all_tasks_blocked)

    def _factory(self, cid: str) -> Any:
        return lambda: Counted(cid, self.starts)

    async def _run_tree(self, supervisor: Supervisor, *, task_status: TaskStatus[ActorRef[SupervisorMessage]]) -> None:
        try:
            async with open_actor(supervisor, name="root") as root:
                task_status.started(root)
                await anyio.sleep_forever()
        except RestartIntensityExceededError as exc:
            self.gave_up = exc

    def teardown(self) -> None:
        self.stack.close()

    # -- helpers ------------------------------------------------------------

    @property
    def m(self) -> OtpModel:
        assert self.model is not None
        return self.model

    def children(self, alive: bool | None = None) -> list[str]:
        return sorted(c for c, a in self.m.alive.items() if alive is None or a == alive)

    def act(self, child: str, action: str | Restart) -> None:
        async def run() -> None:
            assert self.root is not None
            match action:
                case "crash":
                    counted = cast("ActorRef[object]", await get_child(self.root, child))
                    await counted.cast("crash")  # every child is a Counted
                case "stop":
                    ref = await get_child(self.root, child)
                    await ref.stop()
                case "terminate":
                    await terminate_child(self.root, child)
                case "restart":
                    await restart_child(self.root, child)
                case Restart() as kind:
                    spec = ChildSpec(child, self._factory(child), kind, options=ONE_CRASH)
                    await start_child(self.root, spec)
            await anyio.wait_all_tasks_blocked()

        self.portal.call(run)

    # -- rules --------------------------------------------------------------

    @precondition(lambda self: not self.m.gave_up and any(self.m.alive.values()))
    @rule(data=st.data(), crashed=st.booleans())
    def child_exits(self, data: st.DataObject, crashed: bool) -> None:
        child = data.draw(st.sampled_from(self.children(alive=True)))
        self.act(child, "crash" if crashed else "stop")
        self.m.exit(child, crashed)

    @precondition(lambda self: not self.m.gave_up and bool(self.m.alive))
    @rule(data=st.data())
    def terminate_child(self, data: st.DataObject) -> None:
        child = data.draw(st.sampled_from(self.children()))
        self.act(child, "terminate")
        self.m.terminate(child)

    @precondition(lambda self: not self.m.gave_up and not all(self.m.alive.values()))
    @rule(data=st.data())
    def restart_child(self, data: st.DataObject) -> None:
        child = data.draw(st.sampled_from(self.children(alive=False)))
        self.act(child, "restart")
        self.m.restart_child(child)

    @precondition(lambda self: not self.m.gave_up and len(self.m.alive) < 5)
    @rule(kind=st.sampled_from(Restart))
    def start_child(self, kind: Restart) -> None:
        self.added += 1
        child = f"n{self.added}"
        self.act(child, kind)
        self.m.start_child(child, kind)

    @rule()
    def nothing_happens(self) -> None:
        """Keeps the machine able to step after the supervisor gave up."""

    # -- the comparison -------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        if self.model is None:
            return
        assert (self.gave_up is not None) == self.m.gave_up
        if self.m.gave_up:
            assert isinstance(self.gave_up, RestartIntensityExceededError)
            assert isinstance(self.gave_up.__cause__, RuntimeError | type(None))
            return
        assert self.root is not None
        infos = self.portal.call(which_children, self.root)
        assert [i.id for i in infos] == list(self.m.alive)
        running = {i.id: i.state is ActorState.RUNNING for i in infos}
        assert running == self.m.alive
        assert {c: self.starts[c] for c in self.m.starts} == self.m.starts


class TestOtpModelAsyncio(SupervisionMachine.TestCase):  # type: ignore[valid-type,misc]
    settings = settings(max_examples=30, stateful_step_count=12, deadline=None)


class _TrioMachine(SupervisionMachine):
    backend = "trio"


class TestOtpModelTrio(_TrioMachine.TestCase):  # type: ignore[valid-type,misc]
    settings = settings(max_examples=30, stateful_step_count=12, deadline=None)
