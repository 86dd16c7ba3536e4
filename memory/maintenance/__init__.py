"""Scriptorium `memory.maintenance`: whole-workspace jobs: migration (SPEC §6.7), backfill (§6.8), audit.

Layout (see docs/architecture.md): ``_migrate`` position cursors to markers;
``_backfill`` every uncited archived source; ``_audit`` the consistency
report (pure), ``_audit_inputs`` the facts it reads from a state;
``_runtime_audit`` runtime.json's orders and counters, and their repair.
"""

from memory.maintenance._audit import audit as audit
from memory.maintenance._audit_inputs import read_audit_inputs as read_audit_inputs
from memory.maintenance._backfill import BackfillReport as BackfillReport
from memory.maintenance._backfill import backfill as backfill
from memory.maintenance._migrate import MigrationReport as MigrationReport
from memory.maintenance._migrate import Progress as Progress
from memory.maintenance._migrate import migrate as migrate
from memory.maintenance._runtime_audit import repair_runtime_state as repair_runtime_state

__all__ = [
    "BackfillReport",
    "MigrationReport",
    "Progress",
    "audit",
    "backfill",
    "migrate",
    "read_audit_inputs",
    "repair_runtime_state",
]
