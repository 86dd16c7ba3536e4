"""Events are typed: mypy refuses an unknown event, a misspelt or ill-typed field, a dict.

The runtime's events were strings with ``**fields: Any``: a typo in a name
or a field reached the log silently. Now each event is a frozen dataclass,
so the program below has an error exactly on the lines marked ``# error``.
"""

from __future__ import annotations

from pathlib import Path

from tests._mypy import marked_lines, mypy_report

PROGRAM = '''\
from memory.runtime import Marked, RuntimeConfig, Skipped
from memory.runtime._events import EventHook
from memory.writers import Event, ModelRetry


def emit(hook: EventHook) -> None:
    hook.emit(Skipped(session="s", reason="unreadable"))
    hook.emit(Marked(session="s", node_ids=("a", "b"), seconds=0.25))
    hook.emit("skipped", session="s", reason="unreadable")  # error
    hook.emit({"event": "skipped", "session": "s"})  # error
    hook.emit(Skiped(session="s", reason="unreadable"))  # error
    hook.emit(Skipped(session="s", reasn="unreadable"))  # error
    hook.emit(Skipped(session="s"))  # error
    hook.emit(Marked(session="s", node_ids=("a",), seconds="0.25"))  # error
    hook.emit(ModelRetry(model="m", attempt=1, attempts=3, seconds=1.0, error=None))  # error


def listen(event: Event) -> None:
    match event:
        case Marked():
            reveal_type(event.node_ids)
    print(event.session)  # error
    print(event["event"])  # error
    event.at = 0.0  # error


def config() -> RuntimeConfig:
    return RuntimeConfig(on_event=lambda event: print(event["event"]))  # error
'''

ERRORS = marked_lines(PROGRAM)


def test_mypy_refuses_unknown_events_and_wrong_fields(tmp_path: Path) -> None:
    program = tmp_path / "emits_events.py"
    program.write_text(PROGRAM)
    errors, lines = mypy_report(program)
    assert len(ERRORS) == 11 and errors == ERRORS, "\n".join(lines)
    reveal = PROGRAM.splitlines().index("            reveal_type(event.node_ids)") + 1
    assert any(f":{reveal}: note: Revealed type is \"tuple[str, ...]\""
               in line for line in lines), "\n".join(lines)
