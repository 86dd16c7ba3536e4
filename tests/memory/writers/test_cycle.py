"""The write cycle: archive, then install, then marks; nothing marked on any failure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import pytest

from memory._errors import (
    ArchiveStepFailedError,
    CommitRejectedError,
    ConcurrentUpdateError,
    NothingChangedError,
    TransactionError,
    WriterFailedError,
    WriterTimedOutError,
)
from memory.ledger._records import SourceRecord
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.writers._cycle import (
    FailureKind,
    GroupOutcome,
    WriteOutcome,
    changed_files,
    run_group_cycle,
    run_write_cycle,
)
from memory.writers._writer import Batch, CommittedWrite, WriterOutput

BATCH = Batch(
    "s1",
    tuple(SourceRecord("s1", f"m{i}", "user", f"fact {i}", 100.0 + i, "user") for i in range(3)),
    "prompt",
)
EDIT = TopicEdit("topics/core.md", "The owner likes tea.[^e1]\n\n[^e1]: openprogram/s1/m0\n")
OK_AUDIT = (
    {"tool": "write_topic", "status": "ok", "path": "topics/core.md"},
    {"tool": "commit", "status": "ok", "count": 1, "topic_paths": ["topics/core.md"]},
)


class Recorder:
    """The injected steps, each appending its name to ``calls`` when it runs."""

    def __init__(
        self,
        output: Callable[[], WriterOutput] = lambda: [EDIT],
        audit: Iterable[Mapping[str, Any]] = OK_AUDIT,
        fail: str | None = None,
        error: Exception | None = None,
        writer_sleep: float = 0.0,
        commit_sleep: float = 0.0,
    ) -> None:
        self.calls: list[str] = []
        self.output = output
        self.audit = tuple(audit)
        self.fail = fail
        self.error = error or RuntimeError(f"injected failure in {fail}")
        self.writer_sleep = writer_sleep
        self.commit_sleep = commit_sleep
        self.committed: list[tuple[Sequence[TopicEdit], str]] = []

    def _maybe_fail(self, step: str) -> None:
        self.calls.append(step)
        if self.fail == step:
            raise self.error

    async def archive(self, batch: Batch) -> None:
        assert batch is BATCH
        self._maybe_fail("archive")

    async def snapshot(self) -> WorkspaceSnapshot:
        self._maybe_fail("snapshot")
        return WorkspaceSnapshot("rev-after-archive", ("topics/core.md",), lambda p: "")

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
        assert workspace.revision == "rev-after-archive"
        self._maybe_fail("write")
        if self.writer_sleep:
            await anyio.sleep(self.writer_sleep)
        return self.output()

    async def commit(
        self, batch: Batch, edits: Sequence[TopicEdit], base: str
    ) -> Iterable[Mapping[str, Any]]:
        self._maybe_fail("commit")
        self.committed.append((edits, base))
        if self.commit_sleep:
            await anyio.sleep(self.commit_sleep)
        return self.audit


async def cycle(rec: Recorder, timeout: float | None = 600.0) -> WriteOutcome:
    return await run_write_cycle(
        BATCH, rec, snapshot=rec.snapshot, archive=rec.archive, commit=rec.commit, timeout=timeout
    )


def assert_nothing_marked(outcome: WriteOutcome, kind: FailureKind) -> None:
    assert outcome.marks == ()
    assert outcome.changed_files == ()
    assert not outcome.ok and outcome.failure is kind
    assert outcome.error is not None and "nothing was marked" in str(outcome.error)


# -- success, and the order of the steps ---------------------------------------------------


async def test_success_archives_then_commits_and_hands_back_exactly_the_batch() -> None:
    # The cycle marks nothing itself; that the runtime's markers land on disk only
    # after the archive and the install is tests/memory/runtime/test_runtime_write_order.py.
    rec = Recorder()
    outcome = await cycle(rec)
    assert rec.calls == ["archive", "snapshot", "write", "commit"]
    assert outcome.ok and outcome.failure is None and outcome.error is None
    assert outcome.marks == ("m0", "m1", "m2") == BATCH.node_ids
    assert outcome.changed_files == ("topics/core.md",)
    assert outcome.audit == OK_AUDIT
    assert rec.committed == [((EDIT,), "rev-after-archive")]


def test_changed_files_is_the_sorted_union_of_ok_commits() -> None:
    audit: list[dict[str, Any]] = [
        {
            "tool": "commit",
            "status": "ok",
            "count": 2,
            "topic_paths": ["topics/b.md", "topics/a.md"],
        },
        {"tool": "commit", "status": "error", "topic_paths": ["topics/rejected.md"]},
        {"tool": "write_topic", "status": "ok", "topic_paths": ["topics/not-a-commit.md"]},
        {
            "tool": "commit",
            "status": "ok",
            "count": 1,
            "topic_paths": ["topics/a.md", "topics/c.md"],
        },
        {"tool": "commit", "status": "ok", "count": 0},
    ]
    assert changed_files(audit) == ("topics/a.md", "topics/b.md", "topics/c.md")
    assert changed_files([]) == ()


async def test_a_self_committing_writer_is_taken_as_is_and_still_archives_first() -> None:
    written = CommittedWrite(OK_AUDIT, ("topics/x.md", "topics/core.md"))
    rec = Recorder(output=lambda: written)
    outcome = await cycle(rec)
    assert rec.calls == ["archive", "snapshot", "write"]  # no commit step
    assert outcome.marks == BATCH.node_ids
    assert outcome.changed_files == ("topics/x.md", "topics/core.md")


# -- every failure kind marks nothing ------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "kind", "error_type"),
    [
        ("archive", FailureKind.ARCHIVE, ArchiveStepFailedError),
        ("snapshot", FailureKind.SNAPSHOT, None),
        ("write", FailureKind.WRITER, WriterFailedError),
        ("commit", FailureKind.REJECTED, CommitRejectedError),
    ],
)
async def test_an_exception_at_any_step_marks_nothing(
    step: str, kind: FailureKind, error_type: type[Exception] | None
) -> None:
    rec = Recorder(fail=step)
    outcome = await cycle(rec)
    assert_nothing_marked(outcome, kind)
    assert rec.calls[-1] == step  # nothing ran after the failing step
    assert outcome.error is not None and outcome.error.__cause__ is rec.error
    if error_type is not None:
        assert isinstance(outcome.error, error_type)
    assert "session 's1', batch m0..m2 (3 turn(s))" in str(outcome.error)


async def test_a_concurrent_update_is_retryable_and_other_refusals_are_not() -> None:
    outcome = await cycle(Recorder(fail="commit", error=ConcurrentUpdateError("a" * 32, "b" * 32)))
    assert_nothing_marked(outcome, FailureKind.REJECTED)
    assert outcome.error is not None and outcome.error.retryable
    outcome = await cycle(Recorder(fail="commit", error=TransactionError("cites unarchived")))
    assert_nothing_marked(outcome, FailureKind.REJECTED)
    assert outcome.error is not None and not outcome.error.retryable


@pytest.mark.virtual_time
async def test_a_writer_past_the_timeout_marks_nothing() -> None:
    rec = Recorder(writer_sleep=3600.0)
    outcome = await cycle(rec, timeout=600.0)
    assert_nothing_marked(outcome, FailureKind.TIMEOUT)
    assert isinstance(outcome.error, WriterTimedOutError)
    assert "commit" not in rec.calls


@pytest.mark.virtual_time
async def test_the_timeout_covers_the_writer_only_never_an_install_in_progress() -> None:
    rec = Recorder(writer_sleep=5.0, commit_sleep=3600.0)
    outcome = await cycle(rec, timeout=10.0)
    assert outcome.ok and outcome.marks == BATCH.node_ids


async def test_a_writer_raising_timeout_error_itself_is_a_writer_failure() -> None:
    def raise_timeout() -> WriterOutput:
        raise TimeoutError("the model's HTTP client gave up")

    outcome = await cycle(Recorder(output=raise_timeout))
    assert_nothing_marked(outcome, FailureKind.WRITER)


@pytest.mark.parametrize(
    "output",
    [
        list,  # no edits
        lambda: CommittedWrite(OK_AUDIT, ()),  # a self-committing writer that changed nothing
    ],
    ids=["no-edits", "committed-nothing"],
)
async def test_an_empty_result_marks_nothing(output: Callable[[], WriterOutput]) -> None:
    rec = Recorder(output=output)
    outcome = await cycle(rec)
    assert_nothing_marked(outcome, FailureKind.EMPTY)
    assert isinstance(outcome.error, NothingChangedError)
    assert "commit" not in rec.calls


@pytest.mark.parametrize(
    "audit",
    [
        [{"tool": "write_topic", "status": "error", "reason": "cites a pending source"}],
        [{"tool": "commit", "status": "ok", "count": 0, "topic_paths": []}],
        [{"tool": "commit", "status": "error", "topic_paths": ["topics/core.md"]}],
        [],
    ],
)
async def test_a_commit_that_changed_no_file_marks_nothing(audit: list[dict[str, Any]]) -> None:
    outcome = await cycle(Recorder(audit=audit))
    assert_nothing_marked(outcome, FailureKind.EMPTY)
    assert outcome.audit == tuple(audit)  # the audit still says why


@pytest.mark.parametrize("output", [lambda: "edits", lambda: None, lambda: [EDIT, "x"]])
async def test_a_writer_returning_something_else_marks_nothing(output: Callable[[], Any]) -> None:
    rec = Recorder(output=output)
    outcome = await cycle(rec)
    assert_nothing_marked(outcome, FailureKind.WRITER)
    assert "commit" not in rec.calls


async def test_cancellation_propagates_and_returns_no_outcome() -> None:
    rec = Recorder(writer_sleep=3600.0)
    outcomes: list[WriteOutcome] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                outcomes.append(await cycle(rec, timeout=None))

            tg.start_soon(run)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert outcomes == [] and rec.calls == ["archive", "snapshot", "write"]


# -- group commit ----------------------------------------------------------------

GROUP = tuple(
    Batch(f"s{n}", (SourceRecord(f"s{n}", "m0", "user", f"fact {n}", 100.0, "user"),), "")
    for n in range(3)
)


class GroupRecorder:
    """The group steps; ``covered`` answers per batch, ``fail`` names a step that raises."""

    def __init__(self, covered: Sequence[bool] = (True, True, True), fail: str | None = None,
                 audit: Iterable[Mapping[str, Any]] = OK_AUDIT,
                 edits: Sequence[TopicEdit] = (EDIT,)) -> None:
        self.calls: list[str] = []
        self.verdicts = list(covered)
        self.fail = fail
        self.audit = tuple(audit)
        self.edits = list(edits)

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.fail == name:
            raise RuntimeError(f"injected failure in {name}")

    async def archive(self, batches: Sequence[Batch]) -> None:
        assert tuple(batches) == GROUP
        self._step("archive")

    async def snapshot(self) -> WorkspaceSnapshot:
        self._step("snapshot")
        return WorkspaceSnapshot("rev", (), lambda p: "")

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
        raise AssertionError("a group never calls write")

    async def write_group(self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
                          ) -> list[TopicEdit]:
        self._step("write_group")
        if self.fail == "hang":
            await anyio.sleep_forever()
        return self.edits

    async def commit(self, batches: Sequence[Batch], edits: Sequence[TopicEdit], base: str
                     ) -> Iterable[Mapping[str, Any]]:
        assert base == "rev"
        self._step("commit")
        return self.audit

    async def covered(self, batches: Sequence[Batch]) -> list[bool]:
        self._step("covered")
        return self.verdicts


async def group(rec: GroupRecorder, timeout: float | None = 600.0) -> GroupOutcome:
    return await run_group_cycle(GROUP, rec, snapshot=rec.snapshot, archive=rec.archive,
                                 commit=rec.commit, covered=rec.covered, timeout=timeout)


async def test_a_group_commits_once_and_writes_each_covered_batch() -> None:
    rec = GroupRecorder()
    outcome = await group(rec)
    assert rec.calls == ["archive", "snapshot", "write_group", "commit", "covered"]
    assert outcome.fallback is None
    assert [o.marks if o else None for o in outcome.outcomes] == [("m0",)] * 3
    assert all(o is not None and o.changed_files == ("topics/core.md",)
               for o in outcome.outcomes)


async def test_a_batch_the_group_did_not_cover_runs_alone() -> None:
    outcome = await group(GroupRecorder(covered=(True, False, True)))
    assert [o is None for o in outcome.outcomes] == [False, True, False]


@pytest.mark.parametrize("fail", ["archive", "snapshot", "write_group", "commit", "covered"])
async def test_a_failed_step_sends_every_batch_alone(fail: str) -> None:
    outcome = await group(GroupRecorder(fail=fail))
    assert outcome.outcomes == (None, None, None)
    assert outcome.fallback is not None and fail in outcome.fallback


@pytest.mark.parametrize("recorder", [
    GroupRecorder(edits=()),
    GroupRecorder(audit=({"tool": "commit", "status": "ok", "count": 0, "topic_paths": []},)),
])
async def test_a_group_that_changed_nothing_marks_nothing(recorder: GroupRecorder) -> None:
    outcome = await group(recorder)
    assert outcome.outcomes == (None, None, None)
    assert "covered" not in recorder.calls


@pytest.mark.virtual_time
async def test_a_group_writer_past_the_timeout_sends_every_batch_alone() -> None:
    rec = GroupRecorder(fail="hang")
    outcome = await group(rec, timeout=5.0)
    assert outcome.outcomes == (None, None, None)
    assert "commit" not in rec.calls
