"""The legacy source archive (``sources/openprogram/<sid>.md``), read-only.

SPEC §5: before v2, the reference agent archived turns as::

    # <sid>
    <empty line>
    <a id="source-<16hex>"></a>
    <!-- source-id:openprogram/<sid>/<node-id> -->
    [<time>] <role>: <content>
    <empty line>
    ... next record ...

Records carry no length, so a turn's content can contain text that looks
exactly like a later record header, and nothing can tell the forgery from a
real one. The only position that cannot have been written by content is the
very first header, right after ``# <sid>\\n\\n``. Migration (SPEC §6.7) needs
only that: it takes the first trusted record of each legacy file as a
candidate and follows the real DAG from there. Everything after the first
header is never believed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote

from memory._archive import PROVIDER
from memory._records import source_anchor

__all__ = [
    "LegacyHeader",
    "legacy_relpath",
    "parse_legacy_first_header",
    "read_legacy_first_header",
]

_ANCHOR = re.compile(r'<a id="(source-[0-9a-f]{16})"></a>')
_SOURCE = re.compile(r"<!-- source-id:([^>\n]+) -->")
# "[<time>] <role>: ..." (the content after it is not looked at).
_RECORD = re.compile(r"\[([^\]\n]*)\] ([^\n]+?): ")


@dataclass(frozen=True, slots=True)
class LegacyHeader:
    """The one trusted record header of a legacy archive."""

    source_id: str
    message_id: str
    timestamp: str
    role: str


def legacy_relpath(session_id: str) -> str:
    """``sources/openprogram/<sid>.md``, the session id quoted like the v2 archive's."""
    return f"sources/{PROVIDER}/{quote(session_id, safe='-_.')}.md"


def parse_legacy_first_header(text: str, session_id: str) -> LegacyHeader | None:
    """The first record's header if it sits right after ``# <sid>\\n\\n`` and checks out.

    Checked: the anchor equals the hash of the source id, the source id is a
    turn of ``session_id``, and a ``[<time>] <role>: `` record line follows.
    Anything else (including every later header) gives None or is ignored.
    """
    title = f"# {session_id}\n\n"
    if not text.startswith(title):
        return None
    lines = text[len(title) :].split("\n", 3)
    if len(lines) < 3:
        return None
    anchor = _ANCHOR.fullmatch(lines[0])
    source = _SOURCE.fullmatch(lines[1])
    record = _RECORD.match(lines[2])
    if anchor is None or source is None or record is None:
        return None
    source_id = source.group(1)
    prefix = f"{PROVIDER}/{session_id}/"
    if not source_id.startswith(prefix) or len(source_id) == len(prefix):
        return None
    if anchor.group(1) != source_anchor(source_id):
        return None
    return LegacyHeader(source_id, source_id[len(prefix) :], record.group(1), record.group(2))


def read_legacy_first_header(memory_dir: str, session_id: str) -> LegacyHeader | None:
    """The trusted header of the session's legacy archive; None if absent or untrusted."""
    path = os.path.join(memory_dir, legacy_relpath(session_id))
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    # Only the head matters; undecodable bytes later in the file cannot hide it.
    return parse_legacy_first_header(data.decode("utf-8", "replace"), session_id)
