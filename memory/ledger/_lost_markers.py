"""Lost markers: turns that are in memory but lost their marker to another writer.

The reference agent merges node metadata with an unlocked read-modify-write:
it reads a node file, we merge our marker into it, it writes back what it
read plus its own key, and our marker is gone. That race cannot be closed
from one side, but its effect can be recognised afterwards. Markers fill a
branch from its oldest end (a batch is always the oldest owed records), so a
record that is unmarked *behind* a record marked with this workspace's id
was stranded: the walk back from the tip stops at the newer marker and will
never owe it again. When that record is also in memory by the rule that
already marks a re-delivered batch (:func:`written_to_memory`: archived,
and cited by a topic unless it is pending), the write happened and only its
marker was lost: setting the marker again repairs it, and nothing is
written twice.

Not a lost marker:

* an unmarked record that is not in memory: it was never written (setting a
  marker would omit it for good); the audit reports it as a non-prefix gap;
* the unmarked tail after the newest own marker, even when it is in memory
  (a crash between install and mark, or a marker dropped on the newest
  batch): it is owed, and the write cycle delivers it again; a batch whose
  records are all in memory is then marked without a topic change (SPEC
  §6.4's bounded duplicate, docs/decisions.md "Jobs, writers and
  failures"). Repairing it here too would be a second rule for the same case.

Everything here is pure; the session actor, the watchdog's scan and the
audit feed it the facts.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence

from memory.ledger._records import SourceRecord

__all__ = ["lost_markers", "stranded_records", "written_to_memory"]


def written_to_memory(
    record: SourceRecord, archived: Callable[[str], bool], cited: Callable[[str], bool]
) -> bool:
    """Whether ``record`` is in memory: its source is archived and, if trusted, cited.

    Pending records are archived but never cited (SPEC §5), so for them the
    archive is the whole proof. ``archived`` and ``cited`` take a source id
    (``openprogram/<sid>/<node-id>``).
    """
    source = record.source_id
    return archived(source) and (not record.trusted or cited(source))


def stranded_records(records: Sequence[SourceRecord], workspace_id: str) -> list[SourceRecord]:
    """The records (root to tip) without this workspace's marker that lie behind one with it.

    Records with another workspace's marker count as unmarked (SPEC §6.2).
    Empty when the branch has no own marker: then everything is owed.
    """
    for newest in range(len(records) - 1, -1, -1):
        if records[newest].marker == workspace_id:
            return [record for record in records[:newest] if record.marker != workspace_id]
    return []


def lost_markers(
    records: Sequence[SourceRecord],
    workspace_id: str,
    archived: Container[str],
    cited: Container[str],
) -> list[str]:
    """The node ids of the branch's lost markers, root to tip (see the module docstring).

    ``records`` are one branch's records (SPEC §6.1), root to tip;
    ``archived`` the source ids in the v2 archive's valid prefix (at least
    those of :func:`stranded_records`), ``cited`` the source ids some topic
    cites.
    """
    return [
        record.message_id
        for record in stranded_records(records, workspace_id)
        if written_to_memory(record, archived.__contains__, cited.__contains__)
    ]
