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

The header is the anchor line and the ``source-id`` line, nothing more: an
intermediate writer put ``<!-- speaker-id:... -->`` and ``<!-- record-lines:N
-->`` lines between it and the record line, and those files are legacy
archives too. A file's session is its name's stem, percent-decoded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote

from memory.ledger._records import source_anchor
from memory.workspace._archive import PROVIDER

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
# What the intermediate writer put between the header and the record line.
_INTERMEDIATE = re.compile(r"<!-- (?:speaker-id|record-lines):[^\n]* -->")


@dataclass(frozen=True, slots=True)
class LegacyHeader:
    """The one trusted record header of a legacy archive.

    ``timestamp`` and ``role`` come from the record line after the header
    (past any intermediate-writer lines); both are ``""`` when there is none.
    """

    source_id: str
    message_id: str
    timestamp: str
    role: str


def legacy_relpath(session_id: str) -> str:
    """``sources/openprogram/<sid>.md``, the session id quoted like the v2 archive's."""
    return f"sources/{PROVIDER}/{quote(session_id, safe='-_.')}.md"


def parse_legacy_first_header(text: str, session_id: str) -> LegacyHeader | None:
    """The first record's header if it sits right after ``# <sid>\\n\\n`` and checks out.

    The header is the anchor line and the ``source-id`` line. Checked: the
    anchor equals the hash of the source id and the source id is a turn of
    ``session_id``. What follows is not checked. Anything else (including
    every later header) gives None or is ignored.
    """
    title = f"# {session_id}\n\n"
    if not text.startswith(title):
        return None
    lines = text[len(title) :].split("\n", 4)
    if len(lines) < 2:
        return None
    anchor = _ANCHOR.fullmatch(lines[0])
    source = _SOURCE.fullmatch(lines[1])
    if anchor is None or source is None:
        return None
    source_id = source.group(1)
    prefix = f"{PROVIDER}/{session_id}/"
    if not source_id.startswith(prefix) or len(source_id) == len(prefix):
        return None
    if anchor.group(1) != source_anchor(source_id):
        return None
    body = lines[2:]
    while body and _INTERMEDIATE.fullmatch(body[0]):
        body = body[1:]
    record = _RECORD.match(body[0]) if body else None
    timestamp, role = record.groups() if record is not None else ("", "")
    return LegacyHeader(source_id, source_id[len(prefix) :], timestamp, role)


def read_legacy_first_header(
    memory_dir: str, session_id: str, path: str | None = None
) -> LegacyHeader | None:
    """The trusted header of the session's legacy archive; None if absent or untrusted.

    ``path``: the file, when a directory listing found it under another
    percent-encoding of ``session_id`` than :func:`legacy_relpath`'s.
    """
    if path is None:
        path = os.path.join(memory_dir, legacy_relpath(session_id))
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    # Only the head matters; undecodable bytes later in the file cannot hide it.
    return parse_legacy_first_header(data.decode("utf-8", "replace"), session_id)
