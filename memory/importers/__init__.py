"""Scriptorium `memory.importers`: other agents' logs brought in with their DAG.

Layout (see docs/architecture.md): ``_plan`` the shared rules (entries to
the nodes of one session, the id rule); ``_lines`` complete lines of a log
being written; ``_claude_code``, ``_codex``, ``_pi`` one pure parser per
agent; ``_apply`` appends a plan through the runtime; ``_sources`` finds an
agent's logs and reads them; ``_follow`` keeps importing as they grow.
"""

from memory.importers._apply import SessionImport as SessionImport
from memory.importers._apply import apply_plan as apply_plan
from memory.importers._claude_code import SubagentLog as SubagentLog
from memory.importers._claude_code import plan_claude_code as plan_claude_code
from memory.importers._codex import plan_codex as plan_codex
from memory.importers._follow import Follower as Follower
from memory.importers._follow import follow_logs as follow_logs
from memory.importers._follow import watcher_available as watcher_available
from memory.importers._lines import LogLines as LogLines
from memory.importers._lines import read_lines as read_lines
from memory.importers._pi import plan_pi as plan_pi
from memory.importers._plan import Entry as Entry
from memory.importers._plan import PlannedTurn as PlannedTurn
from memory.importers._plan import SessionPlan as SessionPlan
from memory.importers._plan import agent_id as agent_id
from memory.importers._plan import node_id as node_id
from memory.importers._sources import AGENTS as AGENTS
from memory.importers._sources import DEFAULT_ROOTS as DEFAULT_ROOTS
from memory.importers._sources import ImportPass as ImportPass
from memory.importers._sources import LogImporter as LogImporter

__all__ = [
    "AGENTS",
    "DEFAULT_ROOTS",
    "Entry",
    "Follower",
    "ImportPass",
    "LogImporter",
    "LogLines",
    "PlannedTurn",
    "SessionImport",
    "SessionPlan",
    "SubagentLog",
    "agent_id",
    "apply_plan",
    "follow_logs",
    "node_id",
    "plan_claude_code",
    "plan_codex",
    "plan_pi",
    "read_lines",
    "watcher_available",
]
