"""Where an agent keeps its logs, and one import pass over them.

``PATH`` is one log file or a directory searched for ``*.jsonl``; the
default is the agent's own place under the user's home
(:data:`DEFAULT_ROOTS`). A :class:`LogImporter` remembers what it read (each
file's size and modification time), so a pass re-reads only files that
changed and appends only sessions whose files changed: ``--follow`` runs
one pass per change, a cron job one every few minutes.

A file with a malformed line is reported (file and line) and nothing of its
session is imported; the other files are. Claude Code writes one API
response as several lines, so while following, a session whose file ends
in an assistant line that just arrived waits one more pass for that
response's remaining lines (a pass that finds the file unchanged imports it).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from actors import ActorError
from memory._errors import ImportFailedError
from memory.importers._apply import SessionImport, apply_plan
from memory.importers._claude_code import SubagentLog, plan_claude_code
from memory.importers._codex import plan_codex
from memory.importers._lines import LogLines, read_lines
from memory.importers._pi import fork_source, plan_pi, session_of
from memory.importers._plan import SessionPlan
from memory.runtime import ImportInterruptedError, ImportLineError
from store import StoreError

if TYPE_CHECKING:
    from memory.runtime import MemoryRuntime

__all__ = ["AGENTS", "DEFAULT_ROOTS", "ImportPass", "LogImporter"]

DEFAULT_ROOTS = {
    "claude-code": "~/.claude/projects",
    "codex": "~/.codex/sessions",
    "pi": "~/.pi/agent/sessions",
}
AGENTS = tuple(DEFAULT_ROOTS)
SESSIONS_AT_ONCE = 4
Stamp = tuple[int, int]


@dataclass
class ImportPass:
    """One pass: the sessions imported, the files refused (one line each), what was counted."""

    sessions: list[SessionImport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    unknown: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False  # a session's append stopped part way: run the import again

    @property
    def imported(self) -> int:
        return sum(s.imported for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return {"sessions": [s.to_json() for s in self.sessions], "imported": self.imported,
                "errors": self.errors, "waiting": self.waiting, "unknown": dict(self.unknown)}


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _log_files(root: Path) -> list[str]:
    if root.is_file():
        return [str(root)]
    return sorted(str(p) for p in root.rglob("*.jsonl") if p.is_file())


@dataclass
class _Read:
    stamp: Stamp | None
    lines: LogLines | None
    error: str | None


class LogImporter:
    """Import ``agent``'s logs under ``paths``; one instance remembers what it read."""

    def __init__(self, agent: str, paths: Sequence[str | os.PathLike[str]]) -> None:
        if agent not in DEFAULT_ROOTS:
            raise ValueError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)}")
        self.agent = agent
        self.paths = [Path(p).expanduser() for p in paths] or \
            [Path(DEFAULT_ROOTS[agent]).expanduser()]
        self._read: dict[str, _Read] = {}
        self._applied: dict[str, tuple[Stamp | None, ...]] = {}  # session: its files' stamps
        self._reported: set[tuple[str, Stamp | None]] = set()

    def _load(self, file: str) -> _Read:
        """The file's lines, re-read only when its size or time changed."""
        stamp = _stamp(file)
        known = self._read.get(file)
        if known is not None and known.stamp == stamp:
            return known
        try:
            data = Path(file).read_bytes()
            read = _Read(stamp, read_lines(data, file), None)
        except ImportLineError as exc:
            read = _Read(stamp, None, str(exc))
        except OSError as exc:
            read = _Read(stamp, None, f"{file}: cannot be read ({exc.strerror or exc})")
        self._read[file] = read
        return read

    def log_files(self) -> list[str]:
        """Every log file under the paths, in the order they are planned."""
        files: list[str] = []
        for root in self.paths:
            files.extend(f for f in _log_files(root) if f not in files)
        return files

    def _groups(self) -> list[list[str]]:
        """The files of each unit planned together (Claude Code: a session and its sub-agents)."""
        files = self.log_files()
        if self.agent == "codex":
            return [files] if files else []
        if self.agent == "pi":
            return [[f] for f in files]
        mains: dict[str, list[str]] = {}
        for file in files:
            path = Path(file)
            if path.parent.name == "subagents":  # belongs to <session>.jsonl two levels up
                main = str(path.parent.parent.with_suffix(".jsonl"))
                if main not in mains and os.path.isfile(main):
                    mains[main] = []
                if main in mains:
                    continue
            mains.setdefault(file, [])
        groups = []
        for main in mains:
            subs = Path(main).with_suffix("") / "subagents"
            extra = sorted(str(p) for p in subs.glob("agent-*.jsonl")) if subs.is_dir() else []
            groups.append([main, *extra])
        return groups

    def plans(self, *, hold_fresh_tails: bool = False) -> tuple[list[SessionPlan], ImportPass]:
        """Blocking: read what changed and plan every session (errors and counts in the pass)."""
        report = ImportPass()
        plans: list[SessionPlan] = []
        for group in self._groups():
            before = {f: (self._read[f].stamp if f in self._read else None) for f in group}
            reads = {f: self._load(f) for f in group}
            failed = [(f, r) for f, r in reads.items() if r.lines is None]
            for file, read in failed:
                if (file, read.stamp) not in self._reported:
                    self._reported.add((file, read.stamp))
                    report.errors.append(read.error or file)
            logs = {f: r.lines for f, r in reads.items() if r.lines is not None}
            if self.agent == "codex":
                plans.extend(plan_codex(list(logs.values())))
                continue
            if failed:
                continue  # nothing of a session with a malformed file
            if self.agent == "pi":
                plans.extend(self._pi_plan(log) for log in logs.values())
                continue
            main, *subs = group
            plan = plan_claude_code(logs[main], [_subagent(logs[s], s) for s in subs])
            if hold_fresh_tails and before[main] != reads[main].stamp:
                plan = _hold_open_response(plan, logs[main])
            plans.append(plan)
        for plan in plans:
            report.waiting.extend(plan.waiting)
            report.unknown.update(plan.unknown)
        return plans, report

    def _pi_plan(self, log: LogLines) -> SessionPlan:
        source = fork_source(log)
        forked_from = None
        if source is not None:
            try:
                with open(Path(source).expanduser(), "rb") as handle:
                    first = handle.readline()
                forked_from = session_of(read_lines(first, source))
            except (OSError, ImportLineError):
                forked_from = None  # the file it came from is gone: the path alone is kept
        return plan_pi(log, forked_from=forked_from)

    async def run(self, rt: MemoryRuntime, *, dry_run: bool = False,
                  hold_fresh_tails: bool = False) -> ImportPass:
        """One pass: plan in a worker thread, append the sessions whose files changed.

        Sessions are appended ``SESSIONS_AT_ONCE`` at a time: each session's
        turns go one after the other (a turn's predecessor must be there),
        so a first import of many sessions would otherwise wait on one
        durable write at a time.
        """
        plans, report = await anyio.to_thread.run_sync(
            lambda: self.plans(hold_fresh_tails=hold_fresh_tails))
        done: dict[str, SessionImport] = {}
        limiter = anyio.CapacityLimiter(SESSIONS_AT_ONCE)

        async def one(plan: SessionPlan, stamps: tuple[Stamp | None, ...]) -> None:
            async with limiter:
                try:
                    done[plan.session] = await apply_plan(rt, plan, dry_run=dry_run)
                except ImportLineError as exc:
                    report.errors.append(str(exc))
                    if not dry_run:  # refused until its files change: said once
                        self._applied[plan.session] = stamps
                    return
                except (ImportInterruptedError, ImportFailedError) as exc:  # others may import
                    report.errors.append(str(exc))
                    report.interrupted = True
                    return
                except (StoreError, ActorError) as exc:  # this session's files, not the others'
                    report.errors.append(f"session {plan.session!r}: {exc}")
                    report.interrupted = True
                    return
            if not dry_run and not plan.held:
                self._applied[plan.session] = stamps

        async with anyio.create_task_group() as tg:
            for plan in plans:
                stamps = tuple(self._read[f].stamp if f in self._read else None
                               for f in plan.files)
                if dry_run or self._applied.get(plan.session) != stamps or plan.waiting:
                    tg.start_soon(one, plan, stamps)
        report.sessions = [done[p.session] for p in plans if p.session in done]
        report.errors.sort()
        return report


def _subagent(log: LogLines, file: str) -> SubagentLog:
    path = Path(file)
    meta: dict[str, Any] = {}
    try:
        loaded = orjson.loads(path.with_suffix(".meta.json").read_bytes())
        meta = loaded if isinstance(loaded, dict) else {}
    except (OSError, orjson.JSONDecodeError):
        pass  # no meta file: the sub-agent is placed by its agentId or its time
    return SubagentLog(path.stem.removeprefix("agent-"), log, meta)


def _hold_open_response(plan: SessionPlan, log: LogLines) -> SessionPlan:
    """``plan`` without the response its file's last line belongs to, if that is an assistant's."""
    if not log.records:
        return plan
    last = log.records[-1][1]
    message = last.get("message")
    api_id = message.get("id") if isinstance(message, dict) else None
    if last.get("type") != "assistant" or not isinstance(api_id, str):
        return plan
    kept = [t for t in plan.turns
            if not (t.file == log.file and t.metadata.get("message_id") == api_id)]
    if len(kept) == len(plan.turns):
        return plan
    ids = {t.id for t in kept}
    return replace(plan, turns=kept, head=plan.head if plan.head in ids else None, held=True)
