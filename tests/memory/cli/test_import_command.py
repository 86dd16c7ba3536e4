"""``scriptorium import jsonl FILE [--session SID]``: exit codes and one-line errors as the README says.

0 imported (or nothing left to import); 2 a bad line (the file is the
command's argument: one line naming the file and the line, nothing
imported), an unsafe session id or a missing file; 3 an import stopped part
way (the state could not be written: run it again).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

from click.testing import CliRunner

from memory._errors import ImportInterruptedError
from memory.cli._cli import main
from memory.cli._cli_errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, describe
from store import SessionCore

LINES = [
    {"role": "user", "content": "I adopted a cat named Pixel.", "created_at": 1683554160,
     "id": "D1-1", "speaker": "Caroline"},
    {"role": "assistant", "content": "Pixel sounds lovely.", "created_at": 1683554170,
     "id": "D1-2", "speaker": "Melanie"},
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def history(tmp_path: Path, extra: list[str] | None = None) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([json.dumps(line) for line in LINES] + (extra or [])) + "\n")
    return path


def test_import_prints_the_session_and_a_second_import_changes_nothing(tmp_path: Path) -> None:
    state, source = tmp_path / "state", history(tmp_path)
    code, out, err = run("import", "jsonl", str(source), "--session", "s1", "--state", str(state))
    assert (code, err) == (EXIT_OK, "")
    assert out == "s1 (new session): imported 2 turn(s), skipped 0 already there\n"
    node_files = sorted(p.name for p in (state / "sessions" / "s1" / "history").iterdir())
    code, out, _ = run("import", "jsonl", str(source), "--session", "s1", "--json",
                       "--state", str(state))
    assert code == EXIT_OK
    assert json.loads(out) == {"file": str(source), "session": "s1", "created_session": False,
                               "imported": 0, "skipped": 2}
    assert sorted(p.name for p in (state / "sessions" / "s1" / "history").iterdir()) \
        == node_files
    nodes = SessionCore.open(state, "s1").nodes()
    assert [(n.id, n.created_at, n.metadata["speaker_display"]) for n in nodes] == [
        ("D1-1", 1683554160.0, "Caroline"), ("D1-2", 1683554170.0, "Melanie")]


def test_without_a_session_the_files_own_session_is_printed(tmp_path: Path) -> None:
    state, source = tmp_path / "state", history(tmp_path)
    code, out, _ = run("import", "jsonl", str(source), "--json", "--state", str(state))
    assert code == EXIT_OK
    sid = json.loads(out)["session"]
    assert sid.startswith("import-") and (state / "sessions" / sid / "meta.json").is_file()
    code, out, _ = run("import", "jsonl", str(source), "--json", "--state", str(state))
    assert json.loads(out)["session"] == sid and json.loads(out)["imported"] == 0


def test_a_bad_line_is_one_line_naming_the_file_and_line_and_imports_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    source = history(tmp_path, ['{"role": "user", "content": "x", "created_at": 1683554160000}'])
    code, out, err = run("import", "jsonl", str(source), "--session", "s1",
                         "--state", str(state))
    assert code == EXIT_USAGE and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"Error: {source}:3: created_at ")
    assert "nothing of the file was imported" in line and "fix that line" in line
    assert not (state / "sessions" / "s1").exists()


def test_a_line_the_store_would_refuse_later_is_a_bad_line_up_front(tmp_path: Path) -> None:
    """'ROOT' as an id, or as a second first turn's predecessor: exit 2, not 3 for ever."""
    state = tmp_path / "state"
    for extra, says in (
        ('{"role": "user", "content": "x", "id": "ROOT"}', "id 'ROOT' is the predecessor"),
        ('{"role": "user", "content": "x", "predecessor": "ROOT"}',
         "predecessor 'ROOT' would start a second conversation after line 1"),
    ):
        source = history(tmp_path, [extra])
        for _ in range(2):  # and the same again: nothing half imported to finish
            code, out, err = run("import", "jsonl", str(source), "--session", "s1",
                                 "--state", str(state))
            assert code == EXIT_USAGE and out == ""
            (line,) = err.splitlines()
            assert line.startswith(f"Error: {source}:3: {says}"), line
            assert not (state / "sessions" / "s1").exists()


def test_an_unsafe_session_id_or_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    state, source = tmp_path / "state", history(tmp_path)
    code, _, err = run("import", "jsonl", str(source), "--session", "../x", "--state", str(state))
    assert code == EXIT_USAGE and len(err.splitlines()) == 1 and "'../x'" in err
    code, _, err = run("import", "jsonl", str(source), "--session", "a b", "--state", str(state))
    assert code == EXIT_USAGE and "whitespace" in err
    code, _, _ = run("import", "jsonl", str(tmp_path / "absent.jsonl"), "--state", str(state))
    assert code == EXIT_USAGE


def test_an_import_stopped_part_way_exits_3_and_says_to_run_it_again() -> None:
    cause = OSError(errno.ENOSPC, "No space left on device")
    message, code = describe(ImportInterruptedError("h.jsonl", 3, "s1", 2, cause))
    assert code == EXIT_FAILURE
    assert message.startswith("h.jsonl:3: the import into session 's1' stopped")
    assert "run the same import again" in message


def test_an_import_appends_and_never_writes_memory(tmp_path: Path) -> None:
    """Writing is run's or memory write's, with the state's own writer (a model, say)."""
    state = tmp_path / "state"
    words = " ".join(f"fact{i} about the garden" for i in range(400))
    lines = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{words} {i}",
              "id": f"t{i}"} for i in range(60)]  # far over a 16,000-token threshold
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = run("import", "jsonl", str(path), "--session", "big", "--state", str(state))
    assert code == EXIT_OK, err
    nodes = SessionCore.open(str(state), "big").nodes()
    assert len(nodes) == 60
    assert not [n.id for n in nodes if any(k.startswith("memory_written_") for k in n.metadata)]
    assert not (state / "memory" / "topics").exists() or not any(
        (state / "memory" / "topics").iterdir())
