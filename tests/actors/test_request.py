"""Request[R]: ``call`` returns the reply type the request declares, checked by mypy."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from actors import Actor, Idempotent, Request, open_actor, redeliverable

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Double(Idempotent, Request[int]):
    value: int


class Doubler(Actor[Double]):
    async def handle(self, message: Double) -> int:
        return message.value * 2


async def test_a_request_is_an_ordinary_message_at_run_time() -> None:
    async with open_actor(Doubler()) as ref:
        reply: int = await ref.call(Double(21))
    assert reply == 42
    assert redeliverable(Double(1))  # the two bases combine, slots and all


# Each line the type checker must refuse, and why; the rest of the program must pass.
PROGRAM = """
from dataclasses import dataclass

from actors import Actor, ActorRef, Request, open_actor


@dataclass(frozen=True)
class Name(Request[str]):
    pass


@dataclass(frozen=True)
class Age(Request[int]):
    pass


@dataclass(frozen=True)
class Shout:
    text: str


class Person(Actor[Name | Age | Shout]):
    async def handle(self, message: Name | Age | Shout) -> object:
        return "Ada" if isinstance(message, Name) else 36


async def caller(ref: ActorRef[Name | Age | Shout], names: ActorRef[Name]) -> None:
    good: str = await ref.call(Name())
    age: int = await ref.call(Age())
    await ref.cast(Shout("hi"))
    ref.cast_nowait(Shout("hi"))
    narrower: ActorRef[Name] = ref
    reveal_type(await ref.call(Name()))
    wrong_reply: int = await ref.call(Name())  # error: the reply is a str
    untyped: int = await ref.call(Shout("no Request: the reply is an object"))  # error
    await names.call(Age())  # error: names takes Name only
    await names.cast("a str")  # error: not a message of that actor
    names.cast_nowait(Shout("x"))  # error
    wider: ActorRef[Name | Age | Shout] = names  # error: names takes fewer messages
    await ref.call(Name(), timeout=1.0)  # error: no timeout=, the caller's scope decides


async def main() -> None:
    async with open_actor(Person()) as person:
        await caller(person, person)
        await person.call(3)  # error: Person takes no int
"""
ERRORS = {line for line, text in enumerate(PROGRAM.splitlines(), 1) if "# error" in text}


def test_mypy_checks_the_messages_and_replies_of_a_reference(tmp_path: Path) -> None:
    program = tmp_path / "uses_a_request.py"
    program.write_text(PROGRAM)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if "uses_a_request.py" in line]
    errors = {int(line.split(":")[1]) for line in lines if ": error: " in line}
    assert len(ERRORS) == 8 and errors == ERRORS, result.stdout
    reveal = PROGRAM.splitlines().index("    reveal_type(await ref.call(Name()))") + 1
    assert any(f":{reveal}: note: Revealed type is \"str\"" in line
               for line in lines), result.stdout
