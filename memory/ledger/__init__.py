"""Scriptorium `memory.ledger`: what a branch owes (SPEC §6.1-6.3, §6.5): pure rules, no I/O.

Layout (see docs/architecture.md): ``_records`` the unit of memory;
``_ledger`` the record filter, speaker authority, the marker walk and
batches; ``_tokens`` the token counters; ``_lost_markers`` markers whose
evidence is gone; ``_claim`` the batch claims between runtimes; ``_tails`` the
owed tails kept on a session's index; ``_plan`` the session planner as pure
functions; ``_dates`` relative dates ("last week") as spans of days, for the
writer and recall alike.
"""

from memory._errors import ReferenceThresholdWarning as ReferenceThresholdWarning
from memory.ledger._dates import DaySpan as DaySpan
from memory.ledger._dates import RelativeDate as RelativeDate
from memory.ledger._dates import absolute_day as absolute_day
from memory.ledger._dates import annotate_relative_dates as annotate_relative_dates
from memory.ledger._dates import describe_from as describe_from
from memory.ledger._dates import relative_dates as relative_dates
from memory.ledger._dates import resolve_relative_dates as resolve_relative_dates
from memory.ledger._ledger import ALLOWED_THRESHOLDS as ALLOWED_THRESHOLDS
from memory.ledger._ledger import DEFAULT_THRESHOLD as DEFAULT_THRESHOLD
from memory.ledger._ledger import WritePolicy as WritePolicy
from memory.ledger._ledger import batch_due_at as batch_due_at
from memory.ledger._ledger import first_batch as first_batch
from memory.ledger._ledger import owed_tokens as owed_tokens
from memory.ledger._ledger import records_from_branch as records_from_branch
from memory.ledger._ledger import should_write as should_write
from memory.ledger._ledger import should_write_at_boundary as should_write_at_boundary
from memory.ledger._ledger import threshold_warning as threshold_warning
from memory.ledger._ledger import uncitable as uncitable
from memory.ledger._ledger import unwritten_turns as unwritten_turns
from memory.ledger._lost_markers import lost_markers as lost_markers
from memory.ledger._lost_markers import stranded_records as stranded_records
from memory.ledger._lost_markers import written_to_memory as written_to_memory
from memory.ledger._records import MARKER_KEY as MARKER_KEY
from memory.ledger._records import SourceMeta as SourceMeta
from memory.ledger._records import SourceRecord as SourceRecord
from memory.ledger._records import normalize_label as normalize_label
from memory.ledger._records import source_anchor as source_anchor
from memory.ledger._records import source_id as source_id
from memory.ledger._tails import NodeRecords as NodeRecords
from memory.ledger._tokens import TokenCounter as TokenCounter
from memory.ledger._tokens import default_counter as default_counter
from memory.ledger._tokens import estimate_tokens as estimate_tokens

__all__ = [
    "ALLOWED_THRESHOLDS",
    "DEFAULT_THRESHOLD",
    "MARKER_KEY",
    "DaySpan",
    "NodeRecords",
    "ReferenceThresholdWarning",
    "RelativeDate",
    "SourceMeta",
    "SourceRecord",
    "TokenCounter",
    "WritePolicy",
    "absolute_day",
    "annotate_relative_dates",
    "batch_due_at",
    "default_counter",
    "describe_from",
    "estimate_tokens",
    "first_batch",
    "lost_markers",
    "normalize_label",
    "owed_tokens",
    "records_from_branch",
    "relative_dates",
    "resolve_relative_dates",
    "should_write",
    "should_write_at_boundary",
    "source_anchor",
    "source_id",
    "stranded_records",
    "threshold_warning",
    "uncitable",
    "unwritten_turns",
    "written_to_memory",
]
