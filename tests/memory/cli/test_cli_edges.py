"""The command line's rough edges a new user met (issue 21 §1), each with the expected behaviour.

- ``--json`` output cut by a closed pipe exits 141, as text mode does;
- a session id beginning with ``-`` (SPEC §4's id rule allows it) is named
  after ``--``, and the parser's error says so;
- an import file with a UTF-8 byte order mark is read;
- ``memory search`` shows scores that tell hits apart on a small memory.
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory._errors import ImportLineError
from memory.cli._cli import main
from memory.cli._cli_errors import EXIT_BROKEN_PIPE, EXIT_OK, EXIT_USAGE
from memory.runtime._import import parse_import_lines

LINES = [
    {"role": "user", "content": "I adopted a cat named Pixel.", "created_at": 1683554160,
     "id": "D1-1", "speaker": "Caroline"},
    {"role": "assistant", "content": "Pixel sounds lovely. Is Pixel a tabby cat?",
     "created_at": 1683554170, "id": "D1-2", "speaker": "Melanie"},
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), prog_name="scriptorium")
    return result.exit_code, result.stdout, result.stderr


def imported(tmp_path: Path, session: str, lines: Sequence[Mapping[str, object]] = LINES,
             bom: bool = False) -> Path:
    state, source = tmp_path / "state", tmp_path / f"{session.strip('-')}.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in lines)
    source.write_bytes((codecs.BOM_UTF8 if bom else b"") + text.encode("utf-8"))
    code, _, err = run("import", "jsonl", str(source), "--session", session,
                       "--state", str(state))
    assert code == EXIT_OK, err
    return state


# -- a byte order mark --------------------------------------------------------------


def test_an_import_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    state = imported(tmp_path, "bom", bom=True)
    code, out, _ = run("session", "branch", "bom", "--json", "--state", str(state))
    assert code == EXIT_OK
    assert [m["id"] for m in json.loads(out)] == ["D1-1", "D1-2"]


def test_only_a_leading_byte_order_mark_is_dropped() -> None:
    data = codecs.BOM_UTF8 + json.dumps(LINES[0]).encode() + b"\n"
    assert [line.id for line in parse_import_lines(data, "f.jsonl", now=2e9)] == ["D1-1"]
    with pytest.raises(ImportLineError, match="f.jsonl:2: not JSON"):
        parse_import_lines(data + codecs.BOM_UTF8 + b"{}\n", "f.jsonl", now=2e9)


# -- a closed pipe ------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_output_cut_by_a_closed_pipe_exits_141(tmp_path: Path, as_json: bool) -> None:
    """Far more than a pipe holds (64 KiB): the reader takes 10 bytes and goes away."""
    big = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 4000,
            "id": f"t{i}"} for i in range(60)]
    state = imported(tmp_path, "big", big)
    command = [sys.executable, "-c", "from memory.cli import main; main()",
               "session", "branch", "big", "--state", str(state), *(["--json"] * as_json)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    assert len(os.read(child.stdout.fileno(), 10)) > 0
    child.stdout.close()
    stderr = child.stderr.read()
    child.stderr.close()
    assert child.wait(timeout=120) == EXIT_BROKEN_PIPE, stderr
    assert stderr == b""


def test_json_output_is_whole_on_an_open_pipe(tmp_path: Path) -> None:
    big = [{"role": "user" if i % 2 == 0 else "assistant", "content": "y" * 4000,
            "id": f"t{i}"} for i in range(40)]
    state = imported(tmp_path, "whole", big)
    out = subprocess.run([sys.executable, "-c", "from memory.cli import main; main()",
                          "session", "branch", "whole", "--json", "--state", str(state)],
                         capture_output=True, check=True, timeout=120).stdout
    assert [m["id"] for m in json.loads(out)] == [f"t{i}" for i in range(40)]


# -- a session id beginning with '-' --------------------------------------------------


@pytest.mark.parametrize("args", [
    ["session", "branches", "--", "-dash"],
    ["session", "branch", "--tip", "D1-1", "--", "-dash"],
    ["session", "show", "--", "-dash"],
    ["memory", "pending", "--", "-dash"],
    ["memory", "write", "--", "-dash"],
    ["memory", "release", "--", "-dash"],
    ["memory", "search", "Pixel", "--session", "-dash"],
    ["memory", "context", "Pixel", "--session=-dash"],
], ids=lambda args: " ".join(args[:2]))
def test_a_session_id_beginning_with_a_dash_is_named_after_double_dash(
        tmp_path: Path, args: list[str]) -> None:
    state = imported(tmp_path, "-dash")  # import's --session takes it as it is
    code, out, err = run(*args[:2], "--state", str(state), *args[2:])
    assert code == EXIT_OK, err
    assert out.strip() and "No such option" not in err


def test_the_parser_s_error_says_how_to_name_such_an_id(tmp_path: Path) -> None:
    state = imported(tmp_path, "-dash")
    code, _, err = run("session", "show", "--state", str(state), "-dash")
    assert code == EXIT_USAGE
    assert ("A SID starting with '-' goes after '--': scriptorium session show [OPTIONS] -- SID"
            in err)


# -- scores on a small memory -----------------------------------------------------------


def test_search_scores_tell_hits_apart_on_a_small_memory(tmp_path: Path) -> None:
    state = imported(tmp_path, "pets")
    assert run("memory", "write", "pets", "--force", "--state", str(state))[0] == EXIT_OK
    code, out, _ = run("memory", "search", "Pixel cat", "--state", str(state))
    assert code == EXIT_OK
    scores = [float(line.split()[0]) for line in out.splitlines()]
    assert len(scores) >= 2 and scores[0] == 1.0 and 0.0 < scores[-1] <= 1.0
    code, out, _ = run("memory", "search", "Pixel cat", "--json", "--state", str(state))
    hits = json.loads(out)
    assert [round(hit["relative"], 3) for hit in hits] == scores
    assert all(hit["score"] > 0 for hit in hits)
    assert hits[0]["score"] > hits[-1]["score"]  # raw scores keep their order in JSON
