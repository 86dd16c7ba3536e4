"""Transactions: validation rules, the audit, the lock, and all-or-nothing under crashes."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory._errors import ConcurrentUpdateError, InstallJournalCorruptError
from memory.workspace._edits import TopicEdit
from memory.workspace._install_journal import JOURNAL
from memory.workspace._topics import parse_topic
from memory.workspace._transaction import CommitResult, Transactions
from store._durable import TEMP_SUFFIX, DurableFiles
from tests.faults import FaultyFiles, SimulatedCrash, count_steps
from tests.fixture import FIXTURE as SAMPLE
from tests.fixture import copy_fixture

FIXTURE = SAMPLE / "memory"
OWNER = "topics/people/owner.md"
ARCHIVE = {
    "openprogram/demo/u1": True, "openprogram/demo/u2": True, "openprogram/demo/a2": True,
    "openprogram/demo/p1": False, "openprogram/demo/u3": True,
}


def archived(source: str) -> bool | None:
    return ARCHIVE.get(source)


def workspace(root: Path) -> Path:
    return copy_fixture(root / "memory", "memory")


def snapshot(memory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(memory)): path.read_bytes()
        for path in sorted(memory.rglob("*")) if path.is_file()
        and not str(path.relative_to(memory)).startswith(".scriptorium/write.lock")
    }


def draft(body: str, source: str, when: str = "2025-08-12") -> str:
    return f"{body}[^e1]\n\n[^e1]: Time: `{when}`; Sources: {source}\n"


def commit(
    tx: Transactions, edits: list[TopicEdit], batch: set[str] | None = None,
) -> CommitResult:
    return tx.commit(edits, base_revision=tx.revision(), batch_sources=batch or {
        "openprogram/demo/a2"})


NEW = TopicEdit("topics/core.md", "# Core\n\n" + draft("Biscuits too.", "openprogram/demo/a2"))


def test_an_accepted_edit_is_installed_and_audited(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    result = commit(tx, [NEW])
    assert result.audit == (
        {"tool": "write_topic", "path": "topics/core.md", "status": "ok"},
        {"tool": "commit", "status": "ok", "count": 1, "topic_paths": ["topics/core.md"]},
    )
    assert result.changed_files == ("topics/core.md",)
    text = (memory / "topics/core.md").read_text()
    topic = parse_topic(text, "topics/core.md")
    assert "../sources/openprogram/_v2/demo.md#source-90d15db34a915d33" in text
    assert len(topic.paragraphs) == 1
    assert result.revision == tx.revision() != ""
    assert result.created_blocks == (parse_topic(text).paragraphs[0].block_id,)
    assert not (memory / JOURNAL).exists()
    assert stat.S_IMODE((memory / "topics/core.md").stat().st_mode) == 0o600


def test_committing_the_same_edit_again_changes_nothing(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    commit(tx, [NEW])
    before = snapshot(memory)
    again = TopicEdit("topics/core.md", (memory / "topics/core.md").read_text())
    result = commit(tx, [again])
    assert result.changed_files == ()
    assert result.audit[-1] == {"tool": "commit", "status": "ok", "count": 0, "topic_paths": []}
    assert snapshot(memory) == before


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (TopicEdit("sources/openprogram/_v2/demo.md", "x"), "only write topics/"),
        (TopicEdit("topics/../x.md", "x"), "only write topics/"),
        (TopicEdit("topics/.hidden.md", "x"), "only write topics/"),
        (TopicEdit("topics/notes.txt", "x"), "only write topics/"),
        (TopicEdit("topics/a.md", draft("X.", "openprogram/demo/zz")), "not archived"),
        (TopicEdit("topics/a.md", draft("X.", "openprogram/demo/p1")), "pending"),
        (TopicEdit("topics/a.md", draft("X.", "openprogram/demo/u3")),
         "neither in this batch nor cited"),
        (TopicEdit("topics/a.md", "X.[^e1]\n\n[^e1]: Time: `2025`; Sources: "
                   "[a](../sources/openprogram/_v2/demo.md#source-90d15db34a915d33)\n"),
         "no topic cited before"),
        (TopicEdit("topics/a.md", "X.[^e1] trailing\n\n[^e1]: Time: `2025`; Sources: "
                   "openprogram/demo/a2\n"), "after the last citation"),
        (TopicEdit(OWNER, "# Owner\n\n" + draft("Only this.", "openprogram/demo/a2")),
         "would vanish"),
        (TopicEdit(OWNER, None), "would vanish"),
        (TopicEdit(OWNER + "/x.md", draft("X.", "openprogram/demo/a2")), "is a file"),
        (TopicEdit("topics/people.md/", "x"), "only write topics/"),
        (TopicEdit("topics/a.md", draft("Bad \ud800 text.", "openprogram/demo/a2")), "UTF-8"),
    ],
)
def test_each_rule_rejects_the_edit_and_leaves_the_workspace_alone(
    tmp_path: Path, edit: TopicEdit, reason: str,
) -> None:
    memory = workspace(tmp_path)
    before = snapshot(memory)
    tx = Transactions(str(memory), archived=archived)
    result = commit(tx, [edit])
    assert result.audit[0]["status"] == "error"
    assert reason in result.audit[0]["error"]
    assert result.changed_files == ()
    assert snapshot(memory) == before


def test_a_source_already_cited_may_be_cited_again_outside_its_batch(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    edit = TopicEdit("topics/core.md", draft("Tea again.", "openprogram/demo/u1"))
    assert commit(tx, [edit], batch={"openprogram/demo/a2"}).changed_files == ("topics/core.md",)


def test_listed_deletions_may_vanish_and_an_emptied_file_is_pruned(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    edit = TopicEdit(OWNER, "# Owner\n", delete_blocks=frozenset({"37913bbd", "3216f7d0"}))
    result = commit(tx, [edit])
    assert result.changed_files == (OWNER,)
    assert not (memory / OWNER).exists()


def test_a_block_may_move_between_files_only_in_one_commit(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    text = (memory / OWNER).read_text()
    tea = text[text.index("The owner prefers tea."):]
    rest = text[: text.index("The owner prefers tea.")]
    moved = TopicEdit("topics/core.md", tea.replace("../../", "../"))
    alone = commit(tx, [moved])
    assert "still lives in topics/people/owner.md" in alone.audit[0]["error"]
    both = commit(tx, [moved, TopicEdit(OWNER, rest)])
    assert [entry["status"] for entry in both.audit] == ["ok", "ok", "ok"]
    assert parse_topic((memory / "topics/core.md").read_text()).paragraphs[0].ids == (
        "3216f7d0",)


def test_a_rejected_edit_drags_down_the_edit_that_relied_on_it(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    text = (memory / OWNER).read_text()
    tea = text[text.index("The owner prefers tea."):].replace("../../", "../")
    bad = TopicEdit("topics/core.md", tea + "\n" + draft("Bad.", "openprogram/demo/p1"))
    rest = TopicEdit(OWNER, text[: text.index("The owner prefers tea.")])
    before = snapshot(memory)
    result = commit(tx, [bad, rest])
    assert [entry["status"] for entry in result.audit[:2]] == ["error", "error"]
    assert "would vanish" in result.audit[1]["error"]
    assert snapshot(memory) == before


def test_a_stale_base_is_refused_with_concurrent_update(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    base = tx.revision()
    (memory / "timeline/2025/08.md").write_text("changed by someone else\n")
    before = snapshot(memory)
    with pytest.raises(ConcurrentUpdateError, match="fresh snapshot"):
        tx.commit([NEW], base_revision=base, batch_sources={"openprogram/demo/a2"})
    assert snapshot(memory) == before


def test_the_write_lock_serialises_commits_from_two_owners(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    first = Transactions(str(memory), archived=archived)
    second = Transactions(str(memory), archived=archived)
    base = first.revision()
    outcomes: list[str] = []

    def run(tx: Transactions, path: str) -> None:
        edit = TopicEdit(path, draft("Biscuits too.", "openprogram/demo/a2"))
        try:
            tx.commit([edit], base_revision=base, batch_sources={"openprogram/demo/a2"})
            outcomes.append("ok")
        except ConcurrentUpdateError:
            outcomes.append("stale")

    threads = [threading.Thread(target=run, args=(tx, path))
               for tx, path in ((first, "topics/a.md"), (second, "topics/b.md"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ok", "stale"]


def test_a_topic_file_that_fails_the_strict_parse_is_never_rewritten(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    (memory / "topics/broken.md").write_text("A paragraph without anything.\n")
    before = snapshot(memory)
    tx = Transactions(str(memory), archived=archived)
    result = commit(tx, [TopicEdit("topics/broken.md", draft("X.", "openprogram/demo/a2"))])
    assert "fails the strict parse" in result.audit[0]["error"]
    assert snapshot(memory) == before


def test_a_corrupt_journal_stops_recovery_without_touching_topics(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    (memory / JOURNAL).write_bytes(b"{not json")
    before = snapshot(memory)
    with pytest.raises(InstallJournalCorruptError, match="delete it"):
        Transactions(str(memory), archived=archived).recover()
    assert snapshot(memory) == before


# -- crashes -----------------------------------------------------------------------

def prepared(root: Path) -> Path:
    """The fixture plus topics/gone.md, which the crash tests delete."""
    memory = workspace(root)
    tx = Transactions(str(memory), archived=archived)
    commit(tx, [TopicEdit("topics/gone.md", draft("Soon gone.", "openprogram/demo/a2"))])
    return memory


def _three_file_edits(memory: Path) -> list[TopicEdit]:
    text = (memory / OWNER).read_text()
    gone = parse_topic((memory / "topics/gone.md").read_text()).block_ids()
    return [
        TopicEdit(OWNER, text + "\n" + draft("The owner likes jam.", "openprogram/demo/a2")),
        TopicEdit("topics/new/deep.md", draft("Deep fact.", "openprogram/demo/a2")),
        TopicEdit("topics/core.md", draft("Core fact.", "openprogram/demo/a2")),
        TopicEdit("topics/gone.md", None, delete_blocks=frozenset(gone)),
    ]


def _topics_state(memory: Path) -> dict[str, bytes]:
    return {key: value for key, value in snapshot(memory).items() if key.startswith("topics/")}


def test_a_crash_at_any_step_leaves_all_old_or_all_new_and_recovery_finishes(
    tmp_path: Path,
) -> None:
    reference = prepared(tmp_path / "reference")
    old = _topics_state(reference)
    commit(Transactions(str(reference), archived=archived), _three_file_edits(reference))
    new = _topics_state(reference)
    assert old != new

    def run(files: DurableFiles, root: Path) -> None:
        tx = Transactions(str(root), archived=archived, files=files)
        commit(tx, _three_file_edits(root))

    probe = prepared(tmp_path / "probe")
    steps = count_steps(lambda files: run(files, probe))
    assert steps >= 10
    outcomes = set()
    for k in range(steps):
        memory = prepared(tmp_path / f"crash{k}")
        with pytest.raises(SimulatedCrash):
            run(FaultyFiles(crash_at=k), memory)
        # Each file is whole (old or new); the set is made consistent by recovery.
        for path, data in _topics_state_without_temps(memory).items():
            assert data in (old.get(path), new.get(path)), f"{path} torn at step {k}"
        journal = (memory / JOURNAL).exists()
        Transactions(str(memory), archived=archived).recover()
        after = _topics_state(memory)
        assert after in (old, new), f"recovery after step {k}"
        if journal:  # past the commit point: recovery rolls forward
            assert after == new, f"recovery after step {k}"
        assert not (memory / JOURNAL).exists()
        outcomes.add("new" if after == new else "old")
    assert outcomes == {"old", "new"}


def test_a_crash_during_recovery_is_recovered_by_the_next_start(tmp_path: Path) -> None:
    reference = prepared(tmp_path / "reference")
    commit(Transactions(str(reference), archived=archived), _three_file_edits(reference))
    new = _topics_state(reference)

    def crashed_after_commit_point(root: Path) -> None:
        files = FaultyFiles(only=frozenset({"rename"}))
        tx = Transactions(str(root), archived=archived, files=files)
        files.crash_at = 1  # the journal's rename ran; the first topic rename dies
        with pytest.raises(SimulatedCrash):
            commit(tx, _three_file_edits(root))

    probe = prepared(tmp_path / "probe")
    crashed_after_commit_point(probe)
    steps = count_steps(lambda files: Transactions(
        str(probe), archived=archived, files=files).recover())
    for k in range(steps):
        memory = prepared(tmp_path / f"recover{k}")
        crashed_after_commit_point(memory)
        with pytest.raises(SimulatedCrash):
            Transactions(str(memory), archived=archived, files=FaultyFiles(crash_at=k)).recover()
        Transactions(str(memory), archived=archived).recover()
        assert _topics_state(memory) == new, f"recovery crashed at step {k}"


def test_an_io_error_mid_install_is_finished_by_recovery(tmp_path: Path) -> None:
    memory = prepared(tmp_path)
    files = FaultyFiles(only=frozenset({"rename"}), fail_at=2)
    with pytest.raises(OSError):
        commit(Transactions(str(memory), archived=archived, files=files),
               _three_file_edits(memory))
    tx = Transactions(str(memory), archived=archived)
    assert tx.recover() is True
    reference = prepared(tmp_path / "reference")
    commit(Transactions(str(reference), archived=archived), _three_file_edits(reference))
    assert _topics_state(memory) == _topics_state(reference)


def _topics_state_without_temps(memory: Path) -> dict[str, bytes]:
    return {k: v for k, v in _topics_state(memory).items() if not k.endswith(TEMP_SUFFIX)}


def test_the_crash_test_would_catch_an_install_without_a_journal(tmp_path: Path) -> None:
    """Plant the fault: skip the journal, and a crash mid-install is caught as torn."""
    reference = prepared(tmp_path / "reference")
    old = _topics_state(reference)
    commit(Transactions(str(reference), archived=archived), _three_file_edits(reference))
    new = _topics_state(reference)

    class NoJournal(FaultyFiles):
        def write_atomic(self, path: str, data: bytes) -> None:
            if path.endswith("install.journal"):
                return
            super().write_atomic(path, data)

    memory = prepared(tmp_path / "planted")
    files = NoJournal(only=frozenset({"rename"}), crash_at=1)
    with pytest.raises(SimulatedCrash):
        commit(Transactions(str(memory), archived=archived, files=files),
               _three_file_edits(memory))
    Transactions(str(memory), archived=archived).recover()
    after = _topics_state(memory)
    assert after not in (old, new)
    assert all(after.get(path) in (old.get(path), new.get(path)) for path in after)


# -- random edits ------------------------------------------------------------------

# Mostly valid edits (so installs happen), with every kind of fault mixed in.
_sources = st.sampled_from(["openprogram/demo/a2"] * 4 + ["openprogram/demo/u1",
                            "openprogram/demo/p1", "openprogram/demo/zz"])
_paths = st.sampled_from([OWNER, "topics/core.md", "topics/a/b.md", "topics/c.md", "notes/x.md"])
_bodies = st.sampled_from(["The owner prefers tea.", "Fresh fact.", "Another fact."])
_endings = st.sampled_from(["", "", "", " ^37913bbd", " ^3216f7d0", " ^badbadba", " tail"])


@st.composite
def random_edit(draw: st.DrawFn) -> TopicEdit:
    path = draw(_paths)
    if draw(st.integers(0, 5)) == 0:
        return TopicEdit(path, None, delete_blocks=frozenset(
            draw(st.lists(st.sampled_from(["37913bbd", "3216f7d0"])))))
    units = []
    for index in range(draw(st.integers(0 if path == OWNER else 1, 3))):
        units.append(f"{draw(_bodies)}[^e{index}]{draw(_endings)}\n\n[^e{index}]: Time: `2025`; "
                     f"Sources: {draw(_sources)}")
    deleted = ["37913bbd", "3216f7d0"] if path == OWNER and draw(st.booleans()) else []
    return TopicEdit(path, "# T\n\n" + "\n\n".join(units) + "\n",
                     delete_blocks=frozenset(deleted))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(random_edit(), min_size=1, max_size=4), st.none() | st.integers(0, 20))
def test_random_edits_install_completely_or_leave_the_workspace_identical(
    tmp_path_factory: pytest.TempPathFactory, edits: list[TopicEdit], crash_at: int,
) -> None:
    memory = workspace(tmp_path_factory.mktemp("random"))
    before = snapshot(memory)
    files = FaultyFiles(crash_at=crash_at)
    tx = Transactions(str(memory), archived=archived, files=files)
    base = tx.revision()
    try:
        result = tx.commit(edits, base_revision=base, batch_sources={"openprogram/demo/a2"})
    except SimulatedCrash:
        result = None
    Transactions(str(memory), archived=archived).recover()
    after = snapshot(memory)
    if result is not None:
        assert all(parse_topic((memory / path).read_text(), path)
                   for path in result.changed_files if (memory / path).exists())
        ok_paths = {e["path"] for e in result.audit[:-1] if e["status"] == "ok"}
        assert set(result.changed_files) <= ok_paths
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert changed == set(result.changed_files)
        return
    # Crashed: the workspace is byte-identical or holds exactly the full commit.
    if after != before:
        clean = workspace(tmp_path_factory.mktemp("clean"))
        full = Transactions(str(clean), archived=archived).commit(
            edits, base_revision=base, batch_sources={"openprogram/demo/a2"})
        assert after == snapshot(clean)
        assert full.changed_files


def test_a_snapshot_lists_topics_and_reads_them_at_its_revision(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    tx = Transactions(str(memory), archived=archived)
    snap = tx.snapshot()
    assert snap.topic_paths == (OWNER,)
    assert snap.read(OWNER) == (memory / OWNER).read_text()
    result = tx.commit([NEW], base_revision=snap.revision, batch_sources={"openprogram/demo/a2"})
    assert result.changed_files == ("topics/core.md",)
    assert tx.snapshot().revision == result.revision


def test_an_edit_onto_a_directory_is_rejected_not_raised(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    (memory / "topics/odd.md").mkdir()
    tx = Transactions(str(memory), archived=archived)
    result = commit(tx, [TopicEdit("topics/odd.md", draft("X.", "openprogram/demo/a2")), NEW])
    assert "a directory has that name" in result.audit[0]["error"]
    assert result.changed_files == ("topics/core.md",)


def test_the_write_lock_holds_across_processes(tmp_path: Path) -> None:
    memory = workspace(tmp_path)
    script = (
        "import sys; from memory.workspace._install_journal import workspace_lock; "
        "from store._durable import DurableFiles\n"
        f"with workspace_lock({str(memory)!r}, DurableFiles()):\n"
        "    print('held', flush=True); sys.stdin.readline()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        fd = os.open(memory / ".scriptorium/write.lock", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(timeout=30) == 0
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the holder left
        finally:
            os.close(fd)
    finally:
        holder.kill()
        holder.wait()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.lists(random_edit(), min_size=1, max_size=3), min_size=1, max_size=3))
def test_what_a_commit_remembers_of_its_files_is_what_parsing_them_gives(
    tmp_path_factory: pytest.TempPathFactory, commits: list[list[TopicEdit]],
) -> None:
    """A commit keeps the facts of the files it wrote instead of parsing them again."""
    memory = workspace(tmp_path_factory.mktemp("remember"))
    tx = Transactions(str(memory), archived=archived)
    for edits in commits:  # each commit validates against what the last one remembered
        tx.commit(edits, base_revision=tx.revision(), batch_sources={"openprogram/demo/a2"})
    fresh = Transactions(str(memory), archived=archived)
    fresh.revision()
    tx.revision()
    remembered = tx._index.refresh(tx.revisions.last_scan)
    assert remembered == fresh._index.refresh(fresh.revisions.last_scan)
