"""ModelWriter: a batch written into memory by a model behind an HTTP endpoint.

SPEC §8's writer over any OpenAI-compatible or Anthropic endpoint. One
:meth:`ModelWriter.write`:

1. renders the bounded prompt (:mod:`._prompt`) in a worker thread (it
   reads topic files);
2. asks the endpoint for the edits, structured as strongly as it accepts:
   ``json_schema``, else a forced tool call, else JSON in the text. In
   ``auto`` mode a 400/422 that names the form it refused
   (:func:`~memory.writers.model._wire.refuses_form`) steps the mode down
   for the endpoint and the call is sent again; any other 400/422 is the
   batch's refusal: the batch fails and the mode stays;
3. reads the answer strictly (:mod:`._edits`) and has the transaction's
   validator judge the edits (``WorkspaceSnapshot.check``, a dry run of the
   commit); an unreadable answer or a refused edit goes back to the model
   with the reason, at most ``repair_rounds`` times, and then the write
   raises :class:`ModelWriterFailedError`: the cycle fails the batch and marks
   nothing (SPEC §6.4), as for any writer that raises.
   An answer of no edits ("nothing worth remembering") becomes the
   extractive writer's "nothing new to keep" unit citing the batch, so the
   batch is marked instead of being asked again every cycle.

Model writers are not exclusive: several workers call the model at once,
and a commit may meet ``ConcurrentUpdateError``. The runtime then runs the
cycle again on a fresh snapshot; this writer hands back the edits it
already has when every file they touch reads the same as before, and
calls the model again only when one changed.

Budgets: a batch whose calls would pass ``batch_tokens`` fails (it would
again); past ``daily_tokens`` (UTC day) :meth:`deferral` says how long until
the next day, and the runtime's pool offers the batch again then, holding
no worker meanwhile (neither failed nor marked); :meth:`admit`, which a
cycle run on its own (backfill) awaits before its timeout starts, waits
that long instead.
Usage (model, tokens, latency, retries, rounds) goes to ``on_event`` per
batch and adds up in :meth:`statistics`.
"""

from __future__ import annotations

import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import httpx

from memory._errors import (
    ConcurrentUpdateError,
    EndpointRefusedError,
    ModelCallFailedError,
    ModelWriterFailedError,
    TopicError,
    describe_error,
)
from memory.ledger import TokenCounter, default_counter
from memory.workspace import TopicEdit, WorkspaceSnapshot
from memory.writers._extractive import log_nothing_new
from memory.writers._writer import Batch
from memory.writers.model._edits import (
    ActionsUnreadableError,
    EditAction,
    parse_actions,
    to_topic_edits,
)
from memory.writers.model._prompt import WRITING_RULES, Ranking, core_first, render_model_prompt
from memory.writers.model._retry import DailySpend, batch_budget_allows, daily_wait
from memory.writers.model._settings import ENV_PREFIX, ModelSettings, redact_url
from memory.writers.model._transport import Endpoint, Sleep
from memory.writers.model._usage import UsageFile
from memory.writers.model._wire import (
    MODES,
    Completion,
    ResponseUnreadableError,
    build_request,
    read_response,
    refuses_form,
)
from store.lowlevel import run_durable

__all__ = ["ModelWriter", "ModelWriterFailedError"]

_REUSABLE = 256  # batches whose edits are kept for a retry after a concurrent update
USAGE_FLUSH = 1.0  # seconds between writes of the usage file
_STEP_DOWN = (400, 422)


def _read_or_none(snapshot: WorkspaceSnapshot) -> Callable[[str], str | None]:
    paths = frozenset(snapshot.topic_paths)

    def read(path: str) -> str | None:
        if path not in paths:
            return None
        try:
            return snapshot.read(path)
        except (TopicError, OSError):
            return None

    return read


def _edits_and_bases(
    actions: Sequence[EditAction], read: Callable[[str], str | None],
) -> tuple[list[TopicEdit], dict[str, str | None]]:
    """The topic edits, and the text each touched file had at this base (blocking reads)."""
    edits = to_topic_edits(actions, read)
    return edits, {edit.path: read(edit.path) for edit in edits}


def _local_problems(edits: Sequence[TopicEdit]) -> list[str]:
    """What no workspace could accept, said before asking the validator."""
    problems = []
    for edit in edits:
        if not edit.path.startswith("topics/") or not edit.path.endswith(".md"):
            problems.append(f"{edit.path}: only .md files under topics/ may be edited "
                            "(sources/ is read-only)")
    return problems


class ModelWriter:
    """See the module docstring. Close it (``aclose``) to close its endpoint's connections."""

    exclusive = False

    def __init__(
        self, settings: ModelSettings, *, endpoint: Endpoint | None = None,
        transport: httpx.AsyncBaseTransport | None = None, env: Mapping[str, str] | None = None,
        counter: TokenCounter | None = None, rank: Ranking = core_first,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.time, sleep: Sleep = anyio.sleep,
        usage_file: UsageFile | None = None,
    ) -> None:
        self.settings = settings
        self.usage_file = usage_file
        self.endpoint = endpoint or Endpoint(settings, env=env, transport=transport,
                                             sleep=sleep, clock=clock, on_retry=self._retrying)
        self.mode = "json_schema" if settings.mode == "auto" else settings.mode
        self.count = counter or default_counter()
        self.rank = rank
        self.on_event = on_event
        self.clock = clock
        self.sleep = sleep
        self.daily = DailySpend()
        self.totals: Counter[str] = Counter()
        self.seconds = 0.0
        self._pending: dict[str, float] = {}  # usage not yet in the usage file
        self._pending_tokens = 0
        self._flushed_at = -math.inf
        # None: the model found nothing to keep (the log unit is made again on the new base).
        self._reusable: OrderedDict[tuple[str, tuple[str, ...]],
                                    tuple[tuple[TopicEdit, ...] | None,
                                          dict[str, str | None]]] = OrderedDict()

    def __repr__(self) -> str:
        return f"ModelWriter({self.settings.provider}, {redact_url(self.settings.base_url)!r}, " \
               f"model={self.settings.model!r})"

    async def aclose(self) -> None:
        """Flush the pending usage and close the endpoint's connections."""
        with anyio.CancelScope(shield=True):
            if self._pending:
                await self._save({}, 0, now=True)
        await self.endpoint.aclose()

    def statistics(self) -> dict[str, Any]:
        """Totals since start: batches, calls, tokens, retries, repairs, reuses, failures, seconds."""
        return {"model": self.settings.model, "provider": self.settings.provider,
                "mode": self.mode, **{k: self.totals[k] for k in (
                    "batches", "calls", "prompt_tokens", "completion_tokens", "retries",
                    "repairs", "reused", "failed")},
                "seconds": round(self.seconds, 6), "daily_tokens": self.daily.tokens}

    async def deferral(self, batch: Batch) -> float:
        """Seconds until ``batch`` may call the model: 0, or until the next UTC day.

        Past ``daily_tokens`` (this writer's spend, or the usage file's, which
        other runtimes add to) it is the time to midnight UTC. It does not
        wait: the pool puts the job back to be offered again then, and the
        worker takes other work (``model_budget_wait`` says so).
        """
        if self.settings.daily_tokens is not None and self.usage_file is not None:
            try:
                self._spent_today(await run_durable(self.usage_file.daily))
            except Exception as exc:  # noqa: BLE001 - judged on this writer's own count
                self._emit_plain("model_usage_unread", error=describe_error(exc))
        wait = daily_wait(self.settings.daily_tokens, self.daily, self.clock())
        if wait > 0:
            self._emit("model_budget_wait", batch, seconds=wait, daily_tokens=self.daily.tokens)
        return wait

    async def admit(self, batch: Batch) -> None:
        """Wait while the daily budget is spent: for a cycle run without the pool (backfill)."""
        while (wait := await self.deferral(batch)) > 0:
            await self.sleep(wait)

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        key = (batch.session_id, batch.node_ids)
        kept = self._reusable.pop(key, None)
        if kept is not None:
            kept_edits, bases = kept
            read = _read_or_none(workspace)
            same = await anyio.to_thread.run_sync(
                lambda: all(read(path) == text for path, text in bases.items()))
            if same:
                self.totals["reused"] += 1
                self._emit("model_usage", batch, result="reused", prompt_tokens=0,
                           completion_tokens=0, seconds=0.0, retries=0, calls=0, repairs=0)
                await self._save({"reused": 1}, 0)
                if kept_edits is None:
                    return await self._nothing_new(batch, workspace)
                return list(kept_edits)
        usage: Counter[str] = Counter()
        started = anyio.current_time()
        result = "failed"
        try:
            edits = await self._write(batch, workspace, usage)
            result = "ok"
            return edits
        finally:
            seconds = anyio.current_time() - started
            self.seconds += seconds
            self.totals.update(usage)
            self.totals["batches"] += 1
            self.totals["failed"] += result == "failed"
            self._emit("model_usage", batch, result=result, seconds=round(seconds, 6),
                       **{k: usage[k] for k in ("prompt_tokens", "completion_tokens", "retries",
                                                "calls", "repairs")})
            await self._save({**usage, "batches": 1, "failed": int(result == "failed"),
                              "seconds": seconds},
                             usage["prompt_tokens"] + usage["completion_tokens"])

    def _keep(self, batch: Batch, edits: Sequence[TopicEdit], bases: dict[str, str | None]) -> None:
        """Keep accepted edits for a retry of the same batch (see :meth:`write`)."""
        self._reusable[(batch.session_id, batch.node_ids)] = (
            (tuple(edits), bases) if edits else (None, {}))
        while len(self._reusable) > _REUSABLE:
            self._reusable.popitem(last=False)

    def _spent_today(self, spend: DailySpend) -> None:
        """Take the larger of what this writer and the usage file say today's spend is."""
        if spend.day > self.daily.day or (spend.day == self.daily.day
                                           and spend.tokens > self.daily.tokens):
            self.daily = spend

    async def _save(self, delta: Mapping[str, float], tokens: int, *, now: bool = False) -> None:
        """Add one batch's usage to the usage file, at most every ``USAGE_FLUSH`` seconds.

        The pending sums are flushed when the last flush is that old (and on
        :meth:`aclose`): one durable write per second, not one per batch. A
        failure to save is an event and the sums stay pending; it never
        fails the batch.
        """
        if self.usage_file is None:
            return
        for key, value in delta.items():
            self._pending[key] = self._pending.get(key, 0) + value
        self._pending_tokens += tokens
        moment = anyio.current_time()
        if not now and moment - self._flushed_at < USAGE_FLUSH:
            return
        pending, tokens_due = self._pending, self._pending_tokens
        self._pending, self._pending_tokens, self._flushed_at = {}, 0, moment
        saved = False
        try:
            self._spent_today(await run_durable(
                self.usage_file.add, self.settings.model, pending, tokens_due, self.clock()))
            saved = True
        except Exception as exc:  # noqa: BLE001 - accounting must not cost a batch
            self._emit_plain("model_usage_unsaved", error=describe_error(exc))
        finally:
            if not saved:  # failed, or cancelled before the write: pending again
                for key, value in pending.items():
                    self._pending[key] = self._pending.get(key, 0) + value
                self._pending_tokens += tokens_due

    async def _write(
        self, batch: Batch, workspace: WorkspaceSnapshot, usage: Counter[str],
    ) -> list[TopicEdit]:
        s = self.settings
        view = await anyio.to_thread.run_sync(lambda: render_model_prompt(
            batch, workspace, count=self.count, structure_tokens=s.structure_tokens,
            full_files=s.full_files, rank=self.rank))
        turns: list[tuple[str, str]] = [("user", view.text)]
        sources = frozenset(record.source_id for record in batch.records)
        read = _read_or_none(workspace)
        problems: list[str] = []
        for round_ in range(1 + s.repair_rounds):
            if s.batch_tokens is not None:
                estimate = self.count(WRITING_RULES) + sum(self.count(t) for _, t in turns)
                if not batch_budget_allows(s.batch_tokens, usage["prompt_tokens"]
                                           + usage["completion_tokens"], estimate + s.max_tokens):
                    raise ModelWriterFailedError(
                        f"session {batch.session_id}: the batch's token budget ({s.batch_tokens}) "
                        f"does not allow another call" + (f"; last refusal: {problems[0]}"
                                                          if problems else ""))
            completion = await self._call(turns, usage)
            usage["rounds"] += 1
            try:
                actions = parse_actions(completion.answer)
                edits, bases = await anyio.to_thread.run_sync(_edits_and_bases, actions, read)
                problems = _local_problems(edits)
                if not problems and edits and workspace.check is not None:
                    try:
                        audit = await workspace.check(edits, sources)
                    except ConcurrentUpdateError:
                        # Memory moved under the snapshot: the cycle retries, and
                        # these edits serve again if their files did not change.
                        self._keep(batch, edits, bases)
                        raise
                    problems = [f"{entry.get('path')}: {entry.get('error')}" for entry in audit
                                if entry.get("status") == "error"]
            except ActionsUnreadableError as exc:
                problems = [str(exc)]
            if not problems:
                self._keep(batch, edits, bases)
                return edits or await self._nothing_new(batch, workspace)
            if round_ < s.repair_rounds:
                usage["repairs"] += 1
                turns += [("assistant", completion.raw_text or "(empty)"),
                          ("user", "Your edits were refused:\n" + "\n".join(
                              f"- {p}" for p in problems[:20])
                           + "\nSend the complete corrected JSON object {\"edits\": [...]}.")]
        raise ModelWriterFailedError(
            f"session {batch.session_id}: no acceptable edits after {s.repair_rounds} repair "
            f"round(s) from {s.model}: {'; '.join(problems[:5])}")

    async def _nothing_new(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        """The model answered ``{"edits": []}``: the batch's turns logged as nothing new to keep.

        The prompt allows that answer, and an empty edit list would leave the
        batch owed (SPEC §6.4) and sent to the model again every cycle until
        it is quarantined. So, like the extractive writer's chatter, the
        turns are cited by one conversation-log unit and the batch is marked.
        """
        return await anyio.to_thread.run_sync(log_nothing_new, batch.records, workspace)

    async def _call(self, turns: Sequence[tuple[str, str]], usage: Counter[str]) -> Completion:
        s = self.settings
        while True:
            path, headers, body = build_request(
                s.provider, model=s.model, system=WRITING_RULES, turns=turns, mode=self.mode,
                max_tokens=s.max_tokens)
            usage["calls"] += 1  # a call made counts, answered or not
            try:
                document, stats = await self.endpoint.post(path, headers, body)
            except (ModelCallFailedError, ResponseUnreadableError) as exc:
                usage["retries"] += exc.retries
                if not (isinstance(exc, EndpointRefusedError) and s.mode == "auto"
                        and exc.status in _STEP_DOWN and self.mode != MODES[-1]):
                    raise
                # auto: the endpoint says it does not take this structured form: the
                # next one down, for the endpoint's life. A refusal that does not say
                # so is this batch's: it fails, and the mode stays.
                if not refuses_form(s.provider, self.mode, exc.body):
                    raise EndpointRefusedError(
                        f"{exc}; if the endpoint does not take {self.mode} output, set "
                        f"mode = \"{MODES[MODES.index(self.mode) + 1]}\" in [writer] "
                        f"(or ${ENV_PREFIX}MODE)", exc.status, exc.body) from None
                self.mode = MODES[MODES.index(self.mode) + 1]
                self._emit_plain("model_mode", mode=self.mode, status=exc.status)
                continue
            usage["retries"] += stats.retries
            completion = read_response(s.provider, document)
            usage["prompt_tokens"] += completion.prompt_tokens
            usage["completion_tokens"] += completion.completion_tokens
            self.daily = self.daily.add(completion.prompt_tokens + completion.completion_tokens,
                                        self.clock())
            return completion

    def _retrying(self, attempt: int, attempts: int, seconds: float, error: str) -> None:
        """``model_retry``: a call failed and the next attempt waits ``seconds``."""
        self._emit_plain("model_retry", attempt=attempt, attempts=attempts,
                         seconds=round(seconds, 3), error=error)

    def _emit(self, event: str, batch: Batch, **fields: Any) -> None:
        self._emit_plain(event, session=batch.session_id, nodes=len(batch.node_ids), **fields)

    def _emit_plain(self, event: str, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event({"event": event, "at": self.clock(), "model": self.settings.model,
                           **fields})

