"""Scriptorium `memory.workspace`: the workspace on disk (SPEC §5): formats, all-or-nothing installs.

Layout (see docs/architecture.md): ``_workspace_id``, ``_runtime_state``,
``_quarantine`` the ``.scriptorium/`` files; ``_archive``,
``_archive_cache`` the v2 source archive; ``_legacy`` the read-only legacy
archive; ``_topics``, ``_topic_ids`` the topic files and their ids;
``_edits`` what a transaction takes; ``_revision``, ``_transaction`` the
revision and the transaction, ``_topic_facts`` what it knows of each topic
file, ``_install_journal`` its commit point and recovery.
"""

from memory.workspace._archive import PROVIDER as PROVIDER
from memory.workspace._archive import AppendResult as AppendResult
from memory.workspace._archive import ArchiveFrame as ArchiveFrame
from memory.workspace._archive import ArchiveScan as ArchiveScan
from memory.workspace._archive import append_records as append_records
from memory.workspace._archive import archive_relpath as archive_relpath
from memory.workspace._archive import format_timestamp as format_timestamp
from memory.workspace._archive import parse_archive as parse_archive
from memory.workspace._archive import read_archive as read_archive
from memory.workspace._archive_cache import ArchiveCache as ArchiveCache
from memory.workspace._edits import TopicEdit as TopicEdit
from memory.workspace._edits import WorkspaceSnapshot as WorkspaceSnapshot
from memory.workspace._install_journal import workspace_lock as workspace_lock
from memory.workspace._legacy import LegacyHeader as LegacyHeader
from memory.workspace._legacy import legacy_relpath as legacy_relpath
from memory.workspace._legacy import parse_legacy_first_header as parse_legacy_first_header
from memory.workspace._legacy import read_legacy_first_header as read_legacy_first_header
from memory.workspace._quarantine import QuarantineEntry as QuarantineEntry
from memory.workspace._quarantine import is_quarantined as is_quarantined
from memory.workspace._quarantine import read_quarantine as read_quarantine
from memory.workspace._quarantine import write_quarantine as write_quarantine
from memory.workspace._revision import RACY_NS as RACY_NS
from memory.workspace._revision import RevisionCache as RevisionCache
from memory.workspace._revision import revision_paths as revision_paths
from memory.workspace._runtime_state import RuntimeState as RuntimeState
from memory.workspace._runtime_state import read_runtime_state as read_runtime_state
from memory.workspace._runtime_state import read_session_end as read_session_end
from memory.workspace._runtime_state import write_runtime_state as write_runtime_state
from memory.workspace._runtime_state import write_session_end as write_session_end
from memory.workspace._topic_facts import LINKED_TOPIC as LINKED_TOPIC
from memory.workspace._topic_ids import handle_key as handle_key
from memory.workspace._topic_ids import is_source_handle as is_source_handle
from memory.workspace._topic_ids import normalise_topic as normalise_topic
from memory.workspace._topic_ids import source_key as source_key
from memory.workspace._topics import CITATION as CITATION
from memory.workspace._topics import Footnote as Footnote
from memory.workspace._topics import Heading as Heading
from memory.workspace._topics import Paragraph as Paragraph
from memory.workspace._topics import SourceLink as SourceLink
from memory.workspace._topics import Topic as Topic
from memory.workspace._topics import decode_topic as decode_topic
from memory.workspace._topics import parse_topic as parse_topic
from memory.workspace._topics import render_topic as render_topic
from memory.workspace._transaction import CommitResult as CommitResult
from memory.workspace._transaction import Transactions as Transactions
from memory.workspace._workspace_id import (
    load_or_create_workspace_id as load_or_create_workspace_id,
)
from memory.workspace._workspace_id import read_workspace_id as read_workspace_id

__all__ = [
    "CITATION",
    "LINKED_TOPIC",
    "PROVIDER",
    "RACY_NS",
    "AppendResult",
    "ArchiveCache",
    "ArchiveFrame",
    "ArchiveScan",
    "CommitResult",
    "Footnote",
    "Heading",
    "LegacyHeader",
    "Paragraph",
    "QuarantineEntry",
    "RevisionCache",
    "RuntimeState",
    "SourceLink",
    "Topic",
    "TopicEdit",
    "Transactions",
    "WorkspaceSnapshot",
    "append_records",
    "archive_relpath",
    "decode_topic",
    "format_timestamp",
    "handle_key",
    "is_quarantined",
    "is_source_handle",
    "legacy_relpath",
    "load_or_create_workspace_id",
    "normalise_topic",
    "parse_archive",
    "parse_legacy_first_header",
    "parse_topic",
    "read_archive",
    "read_legacy_first_header",
    "read_quarantine",
    "read_runtime_state",
    "read_session_end",
    "read_workspace_id",
    "render_topic",
    "revision_paths",
    "source_key",
    "workspace_lock",
    "write_quarantine",
    "write_runtime_state",
    "write_session_end",
]
