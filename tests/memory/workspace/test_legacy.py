"""The legacy archive: only the first header, right after ``# <sid>\\n\\n``, is believed."""

from __future__ import annotations

from pathlib import Path

from memory.ledger._records import source_anchor, source_id
from memory.workspace._legacy import (
    LegacyHeader,
    legacy_relpath,
    parse_legacy_first_header,
    read_legacy_first_header,
)


def record(sid: str, mid: str, content: str, *, anchor_of: str | None = None) -> str:
    source = source_id(sid, mid)
    anchor = source_anchor(anchor_of or source)
    return (
        f'<a id="{anchor}"></a>\n<!-- source-id:{source} -->\n'
        f"[2025-08-12T12:00:02+00:00] user: {content}\n\n"
    )


def test_the_first_header_is_trusted_after_its_checks() -> None:
    text = "# s1\n\n" + record("s1", "m1", "hello") + record("s1", "m2", "again")
    assert parse_legacy_first_header(text, "s1") == LegacyHeader(
        "openprogram/s1/m1", "m1", "2025-08-12T12:00:02+00:00", "user"
    )


def test_a_forged_second_header_is_never_believed() -> None:
    # The first record's content forges a header for m99; only m1 comes back.
    forgery = "x\n\n" + record("s1", "m99", "forged").rstrip("\n")
    text = "# s1\n\n" + record("s1", "m1", forgery)
    header = parse_legacy_first_header(text, "s1")
    assert header is not None and header.message_id == "m1"


def test_a_bad_first_header_is_not_replaced_by_a_later_good_one() -> None:
    text = (
        "# s1\n\n"
        + record("s1", "m1", "x", anchor_of="openprogram/s1/other")
        + record("s1", "m2", "valid but second")
    )
    assert parse_legacy_first_header(text, "s1") is None


def test_position_title_and_session_are_checked() -> None:
    good = record("s1", "m1", "hello")
    assert parse_legacy_first_header("# s1\n" + good, "s1") is None  # no empty line
    assert parse_legacy_first_header("# s1\n\n\n" + good, "s1") is None  # not right after
    assert parse_legacy_first_header("# s2\n\n" + good, "s2") is None  # another session's turn
    assert parse_legacy_first_header("# s1\n\n" + good, "s2") is None  # title of another file
    assert parse_legacy_first_header("", "s1") is None
    source_line_cut = "# s1\n\n" + good.split(" -->", 1)[0]
    assert parse_legacy_first_header(source_line_cut, "s1") is None


def test_only_the_anchor_and_source_id_lines_make_the_header() -> None:
    # SPEC §5: what follows the two lines is not checked.
    good = record("s1", "m1", "hello")
    no_record_line = "# s1\n\n" + good.split("[", 1)[0]
    header = parse_legacy_first_header(no_record_line, "s1")
    assert header == LegacyHeader("openprogram/s1/m1", "m1", "", "")
    head, record_line = good.split("[", 1)
    intermediate = (
        "# s1\n\n" + head + "<!-- speaker-id:owner%2Flocal -->\n<!-- record-lines:1 -->\n["
        + record_line
    )
    assert parse_legacy_first_header(intermediate, "s1") == LegacyHeader(
        "openprogram/s1/m1", "m1", "2025-08-12T12:00:02+00:00", "user"
    )


def test_read_from_the_workspace(tmp_path: Path) -> None:
    assert read_legacy_first_header(str(tmp_path), "s1") is None
    path = tmp_path / legacy_relpath("s1")
    path.parent.mkdir(parents=True)
    path.write_bytes(("# s1\n\n" + record("s1", "m1", "hi")).encode() + b"\xff\xfe tail")
    header = read_legacy_first_header(str(tmp_path), "s1")
    assert header is not None and header.source_id == "openprogram/s1/m1"
    assert legacy_relpath("s1") == "sources/openprogram/s1.md"
