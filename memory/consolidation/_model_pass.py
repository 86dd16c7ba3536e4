"""A consolidation pass whose plan a model proposes (:mod:`._model`), over the writer's endpoint.

The model is asked once per pass, in text mode (one JSON object in the
answer: the one form every endpoint takes), through the model writer's
:class:`~memory.writers.model.Endpoint` (retries, timeouts, redaction).
The proposal becomes a plan, is checked by ``losses`` and committed exactly
as an offline pass is (:func:`~._pass.prepare_pass`, :func:`~._pass.commit_pass`).
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from memory._errors import ConsolidationRefusedError
from memory.consolidation._model import (
    RULES,
    ProposalError,
    apply_proposals,
    parse_proposals,
    render_prompt,
)
from memory.consolidation._pass import PreparedPass, Scope, commit_pass, prepare_pass, read_topics
from memory.consolidation._plan import Plan
from memory.workspace._topics import Topic
from memory.workspace._transaction import Transactions
from memory.writers.model._settings import ModelSettings
from memory.writers.model._transport import Endpoint
from memory.writers.model._wire import ResponseUnreadableError, build_request, read_response
from store import LOCK_TIMEOUT, DurableFiles

__all__ = ["ModelConsolidator", "consolidate_with_model"]


class ModelConsolidator:
    """Asks ``endpoint``'s model for a pass over the topics; see :mod:`._model`."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.calls = 0

    async def plan(self, topics: Mapping[str, Topic]) -> Plan:
        settings: ModelSettings = self.endpoint.settings
        path, headers, body = build_request(
            settings.provider, model=settings.model, system=RULES,
            turns=[("user", render_prompt(topics))], mode="text",
            max_tokens=settings.max_tokens)
        self.calls += 1
        document, _ = await self.endpoint.post(path, headers, body)
        try:
            answer = read_response(settings.provider, document).answer
            return apply_proposals(topics, parse_proposals(answer))
        except (ProposalError, ResponseUnreadableError) as error:
            raise ConsolidationRefusedError([f"the model's proposal cannot be applied: {error}"]
                                            ) from None


async def consolidate_with_model(
    memory_dir: str, consolidator: ModelConsolidator, *, scope: Scope, now: float,
    dry_run: bool = False, files: DurableFiles | None = None,
    lock_timeout: float | None = LOCK_TIMEOUT,
) -> PreparedPass:
    """One model pass over ``<state>/memory`` (the model's counterpart of
    :func:`~._pass.consolidate_workspace`); refused whole like it."""
    transactions = Transactions(memory_dir, archived=lambda _: None, files=files,
                                lock_timeout=lock_timeout)
    await anyio.to_thread.run_sync(transactions.recover)
    snapshot = await anyio.to_thread.run_sync(transactions.snapshot)
    topics = await anyio.to_thread.run_sync(read_topics, snapshot)
    plan = await consolidator.plan(topics)
    prepared = await anyio.to_thread.run_sync(
        lambda: prepare_pass(snapshot, lambda _: plan, scope=scope, now=now))
    if not dry_run:
        await anyio.to_thread.run_sync(commit_pass, transactions, prepared, now)
    return prepared
