"""One process's share of a simulated run, and how the shares of a sharded run add up.

A run is the workload, then the oracle. :func:`~memory.simulate._simulate.run_share`
runs the workload of one process (every agent, or one shard's) and returns a
:class:`Share`: what the oracle needs besides the files (its evidence) and
what the report counts. A sharded run (:mod:`memory.simulate._shards`) gets
one share from each of its processes and adds them up here, so the oracle
and the report see one run whichever way it ran.

A share crosses a process boundary, so it holds plain data only (it is
pickled by the process that made it and read by the one that started it).
The shards' sessions are disjoint, so adding up is a union of their
evidence and a sum of their counts; times that each process took on its
own clock are kept relative to that process's start, never compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from memory.simulate._agents import Acknowledged, Agent
from memory.simulate._open_loop import OpenLoop
from memory.simulate._oracle import Evidence, outside_evidence
from memory.simulate._result import Totals

__all__ = ["Share", "merge_shares", "relative_loop"]

_V = TypeVar("_V")


@dataclass
class Share:
    """See the module docstring; one process's agents and what it saw of them."""

    agents: list[Agent]
    acknowledged: Acknowledged
    totals: Totals
    updated_before_boundary: dict[str, float]
    updated_after_boundary: dict[str, float]
    outside: dict[str, object]  # the outside writer's report ({} when it did not run)
    agent_writes: dict[str, object]  # the unlocked agent's report ({} when it did not run)
    process_crashes: int
    actor_crashes: dict[str, int]
    injected: dict[str, int]
    workspace_id: str
    notes: list[str]
    workload_ended: float  # wall clock: when this process's last arrival returned
    due_to_durable_load: list[float]  # seconds, of the batches due while turns arrived
    open_loop: OpenLoop | None
    peak_rss_mb: float

    def evidence(self) -> Evidence:
        """What the oracle is told besides the files."""
        return Evidence(
            acknowledged=self.acknowledged.keys,
            updated_before_boundary=self.updated_before_boundary,
            updated_after_boundary=self.updated_after_boundary,
            written_batches=self.totals.written_batches,
            process_crashes=self.process_crashes,
            actor_crashes=self.actor_crashes,
            summarised=self.acknowledged.summarised,
            **outside_evidence(self.agent_writes),
        )


def merge_shares(shares: Sequence[Share]) -> Share:
    """The shares of one sharded run as one share (disjoint sessions: unions and sums).

    Peak RSS is the sum of the processes' peaks (they ran at once), an upper
    bound of the run's footprint.
    """
    if not shares:
        raise ValueError("a sharded run returned no share")
    acknowledged = Acknowledged()
    totals = Totals()
    for share in shares:
        for key, keys in share.acknowledged.keys.items():
            acknowledged.keys[key].update(keys)
        acknowledged.summarised.update(share.acknowledged.summarised)
        totals.merge(share.totals)
    workspaces = {share.workspace_id for share in shares}
    if len(workspaces) != 1:
        raise RuntimeError(f"the processes of one run saw different workspaces: {workspaces}")
    return Share(
        agents=sorted((agent for share in shares for agent in share.agents),
                      key=lambda agent: agent.index),
        acknowledged=acknowledged,
        totals=totals,
        updated_before_boundary=_union(share.updated_before_boundary for share in shares),
        updated_after_boundary=_union(share.updated_after_boundary for share in shares),
        outside=_merge_reports([share.outside for share in shares]),
        agent_writes=_merge_reports([share.agent_writes for share in shares]),
        process_crashes=sum(share.process_crashes for share in shares),
        actor_crashes=_union(share.actor_crashes for share in shares),
        injected=_sum(share.injected for share in shares),
        workspace_id=workspaces.pop(),
        notes=list(dict.fromkeys(note for share in shares for note in share.notes)),
        workload_ended=max(share.workload_ended for share in shares),
        due_to_durable_load=[s for share in shares for s in share.due_to_durable_load],
        open_loop=_merge_loops([share.open_loop for share in shares]),
        peak_rss_mb=sum(share.peak_rss_mb for share in shares),
    )


def relative_loop(loop: OpenLoop) -> OpenLoop:
    """``loop`` with its issue times from its own start: another process's clock is not ours."""
    start = loop.start or 0.0
    return dataclasses.replace(loop, start=0.0,
                               issued={k: at - start for k, at in loop.issued.items()})


def _merge_loops(loops: list[OpenLoop | None]) -> OpenLoop | None:
    kept = [relative_loop(loop) for loop in loops if loop is not None]
    if not kept:
        return None
    merged = OpenLoop(kept[0].offsets, kept[0].lanes, start=0.0)
    for loop in kept:
        merged.issued.update(loop.issued)
        merged.lateness.update(loop.lateness)
        merged.late += loop.late
    return merged


def _union(maps: Iterable[Mapping[str, _V]]) -> dict[str, _V]:
    merged: dict[str, _V] = {}
    for mapping in maps:
        merged.update(mapping)
    return merged


def _sum(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for mapping in maps:
        for key, count in mapping.items():
            merged[key] = merged.get(key, 0) + count
    return merged


def _merge_reports(reports: list[dict[str, object]]) -> dict[str, object]:
    """The outside processes' reports: each a dict of lists (appended, merged...), joined."""
    merged: dict[str, object] = {}
    for report in reports:
        for key, value in report.items():
            if isinstance(value, list):
                kept = merged.setdefault(key, [])
                assert isinstance(kept, list)
                kept.extend(value)
            elif isinstance(value, dict):
                kept_map = merged.setdefault(key, {})
                assert isinstance(kept_map, dict)
                kept_map.update(value)
            else:
                merged.setdefault(key, value)
    return merged
