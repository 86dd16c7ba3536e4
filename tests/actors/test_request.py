"""Request[R]: ``call`` returns the reply type the request declares, checked by mypy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors import Actor, Idempotent, Request, open_actor, redeliverable

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Double(Idempotent, Request[int]):
    value: int


class Doubler(Actor):
    async def handle(self, message: Any) -> Any:
        assert isinstance(message, Double)
        return message.value * 2


async def test_a_request_is_an_ordinary_message_at_run_time() -> None:
    async with open_actor(Doubler()) as ref:
        reply = await ref.call(Double(21))
    assert reply == 42
    assert redeliverable(Double(1))  # the two bases combine, slots and all


def test_mypy_checks_the_reply_type_of_a_call(tmp_path: Path) -> None:
    program = tmp_path / "uses_a_request.py"
    program.write_text(textwrap.dedent("""
        from dataclasses import dataclass

        from actors import ActorRef, Request


        @dataclass(frozen=True)
        class Name(Request[str]):
            pass


        async def caller(ref: ActorRef) -> None:
            good: str = await ref.call(Name())
            wrong: int = await ref.call(Name())
            untyped: int = await ref.call("no Request: the reply is an object")
            reveal_type(await ref.call(Name()))
    """))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if "uses_a_request.py" in line]
    errors = {int(line.split(":")[1]) for line in lines if ": error: " in line}
    assert errors == {14, 15}, result.stdout  # the wrong reply type, and an untyped reply
    assert any(':16: note: Revealed type is "' in line and 'str"' in line
               for line in lines), result.stdout
