"""Claude Code layouts the built session does not hold: callers found without a meta file."""

from __future__ import annotations

import json
from typing import Any

from memory.importers import SubagentLog, plan_claude_code, read_lines


def _line(kind: str, uuid: str, parent: str | None, second: int, content: Any,
          **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s",
            "timestamp": f"2025-11-19T22:00:{second:02d}.000Z",
            "message": {"role": kind, "content": content}, **extra}


def _log(lines: list[dict[str, Any]], name: str = "s.jsonl") -> Any:
    return read_lines("".join(json.dumps(line) + "\n" for line in lines).encode(), name)


def _task(uuid: str, parent: str | None, second: int, use: str) -> dict[str, Any]:
    line = _line("assistant", uuid, parent, second,
                 [{"type": "tool_use", "id": use, "name": "Task", "input": {}}])
    line["message"]["id"] = f"msg-{uuid}"
    return line


def test_an_inline_sidechain_without_agent_id_is_called_by_the_task_whose_run_spans_it() -> None:
    main = _log([
        _line("user", "u1", "missing-parent", 0, "Research two things."),  # starts mid-session
        _task("t1", "u1", 1, "use-1"),
        _line("user", "r1", "t1", 10, [{"type": "tool_result", "tool_use_id": "use-1",
                                        "content": "done"}]),
        _task("t2", "r1", 11, "use-2"),
        _line("user", "r2", "t2", 20, [{"type": "tool_result", "tool_use_id": "use-2",
                                        "content": "done"}]),
        _line("assistant", "x1", None, 5, "First research.", isSidechain=True),
        _line("assistant", "x2", None, 15, "Second research.", isSidechain=True),
        {"type": "summary", "summary": "Two research tasks", "leafUuid": "r2"},
        {"type": "queue-operation", "operation": "enqueue"},
    ])
    plan = plan_claude_code(main)
    callers = {t.id: t.caller for t in plan.turns if t.is_spawn_root}
    assert callers == {"x1": "t1", "x2": "t2"}
    assert plan.turns[0].id == "u1" and plan.turns[0].predecessor == "ROOT"
    assert plan.title == "Two research tasks" and dict(plan.unknown) == {"queue-operation": 1}


def test_a_sub_agent_file_without_meta_is_placed_by_the_agent_id_its_result_names() -> None:
    main = _log([
        _line("user", "u1", None, 0, "Two agents."),
        _task("t1", "u1", 1, "use-1"),
        _task("t2", "t1", 1, "use-2"),
        _line("user", "r2", "t2", 30, [{"type": "tool_result", "tool_use_id": "use-2",
                                        "content": "ok"}], toolUseResult={"agentId": "bee"}),
    ])
    sub = _log([_line("user", "b1", None, 2, "Do it.", isSidechain=True, agentId="bee"),
                _line("assistant", "b2", "b1", 3, "Done.", isSidechain=True, agentId="bee")],
               "s/subagents/agent-bee.jsonl")
    plan = plan_claude_code(main, [SubagentLog("bee", sub)])
    roots = {t.id: t.caller for t in plan.turns if t.is_spawn_root}
    assert roots == {"b1": "t2"}  # not t1, although t1's call also spans its time
    b2 = next(t for t in plan.turns if t.id == "b2")
    assert b2.predecessor == "b1" and b2.metadata["speaker_id"] == "claude-code/agent/bee"
