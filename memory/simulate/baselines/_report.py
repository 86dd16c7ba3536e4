"""``--compare``: the same forking workload through four ledgers, side by side (issue 6).

SPEC §1 claims three things about the ledger: the replaced position cursor
*omits* turns at forks, silently; markers merged without one owner *lose*
metadata (the lost-marker race); and markers walked back from the tip cost
what the backlog costs, not what the session costs. This module measures
all three on one seeded workload instead of asserting them:

* :func:`run_baselines` replays the workload of
  :mod:`memory.simulate.baselines._workload` into each ledger of
  :mod:`memory.simulate.baselines._ledgers`, writing a branch's owed turns in batches
  after every turn (head branch) and at each session's end (every live tip,
  head first, until nothing is owed or a pass makes no progress), and
  counts, against the turns of every live branch at the end: omitted turns
  (never delivered), duplicated deliveries, lost metadata keys. It adds the
  race on real files (:mod:`memory.simulate.baselines._race`) and the owed-cost
  scaling (:mod:`memory.simulate.baselines._scaling`).
* :func:`render_baselines` prints that report as Markdown tables.

The report is plain JSON data; ``scriptorium simulate --compare`` and
``bench/run.py`` both call these two functions.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ._ledgers import (
    CursorLedger,
    ExternalSetLedger,
    Ledger,
    MarkerLedger,
    NaiveMarkerLedger,
)
from ._race import race_on_disk
from ._scaling import DEFAULT_SIZES, measure_owed_scaling
from ._workload import SessionModel, Workload, generate_workload

__all__ = ["LEDGERS", "compare_ledgers", "render_baselines", "run_baselines"]

LEDGERS = ("cursor", "naive_rmw", "external_set", "markers")
_WORKSPACE = "w-0b5e1111"
_LABELS = {
    "cursor": "(a) position cursor (SPEC §1, replaced)",
    "naive_rmw": "(b) markers, naive read-modify-write",
    "external_set": "(c) external set of written ids",
    "markers": "(d) scriptorium markers",
}


def _new_ledgers(seed: int, collide: float) -> list[Ledger]:
    return [
        CursorLedger(),
        NaiveMarkerLedger(_WORKSPACE, seed, collide),
        ExternalSetLedger(),
        MarkerLedger(_WORKSPACE, seed, collide),
    ]


class _Run:
    """One ledger's replay: its own copy of each session, and what it delivered."""

    def __init__(self, ledger: Ledger, batch: int) -> None:
        self.ledger = ledger
        self.batch = batch
        self.delivered: Counter[tuple[str, str]] = Counter()
        self.batches = 0
        self.stalls = 0

    def write(self, model: SessionModel, tip: str, *, everything: bool) -> None:
        """Deliver ``tip``'s owed turns, oldest first, a batch at a time."""
        previous: list[str] | None = None
        while True:
            owed = self.ledger.owed(model, tip)
            if not owed or (not everything and len(owed) < self.batch):
                return
            ids = [record.message_id for record in owed]
            if ids == previous:  # SPEC §6.6: a pass without progress ends, never loops
                self.stalls += 1
                return
            previous = ids
            chunk = owed[: self.batch]
            for record in chunk:
                self.delivered[(model.session, record.message_id)] += 1
            self.batches += 1
            self.ledger.record(model, chunk)


def compare_ledgers(
    workload: Workload, *, batch: int = 8, collide: float = 0.25,
    ledgers: Sequence[Ledger] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per ledger: omitted, duplicated, lost keys...; and the workload's own figures.

    ``ledgers`` defaults to the four of :data:`LEDGERS`; a test passes its own
    (say, one planted to skip a turn) to show the counts catch it.
    """
    if ledgers is None:
        ledgers = _new_ledgers(workload.seed, collide)
    runs = [_Run(ledger, batch) for ledger in ledgers]
    expected: set[tuple[str, str]] = set()
    tips = 0
    for session, ops in workload.sessions.items():
        models = [SessionModel(session) for _ in runs]
        ends = set(workload.steps[session])
        for count, op in enumerate(ops, start=1):
            for model in models:
                model.apply(op, now=1_755_000_000.0 + count)
            if count in ends:
                for run, model in zip(runs, models):
                    if model.head is not None:
                        run.write(model, model.head, everything=False)
        for run, model in zip(runs, models):  # the session boundary: every live tip
            for tip in model.tips():
                run.write(model, tip, everything=True)
        final = models[0]
        for tip in final.tips():
            tips += 1
            expected.update((session, r.message_id) for r in final.records(tip))
    results: dict[str, dict[str, Any]] = {}
    for run in runs:
        delivered = run.delivered
        ledger = run.ledger
        results[ledger.name] = {
            "omitted": len(expected - set(delivered)),
            "duplicated": sum(n - 1 for n in delivered.values() if n > 1),
            "lost_keys": ledger.lost_keys,
            "delivered": sum(delivered.values()),
            "batches": run.batches,
            "stalled_passes": run.stalls,
            "entries_outside_sessions": ledger.stored_outside(),
        }
    figures = {
        "sessions": len(workload.sessions),
        "nodes": workload.nodes,
        "live_tips": tips,
        "recordable_turns": len(expected),
        "kinds": dict(sorted(workload.kinds.items())),
        "batch_records": batch,
        "collision_rate": collide,
    }
    return results, figures


def run_baselines(
    *,
    seed: int,
    sessions: int,
    turns: int,
    batch: int = 8,
    collide: float = 0.25,
    scaling_sizes: Sequence[int] | None = DEFAULT_SIZES,
    backlog: int = 10,
    repeat: int = 3,
    race_nodes: int = 16,
    on_disk: bool = True,
    state_dir: str | None = None,
) -> dict[str, Any]:
    """The whole comparison as one JSON-able report (see :func:`render_baselines`).

    ``sessions`` sessions of ``turns`` steps each (a step is a turn, a retry,
    a re-ask or a rewind) of the seeded workload go through the four ledgers;
    ``race_nodes`` node files race on disk under ``state_dir`` (a temporary
    directory by default); ``scaling_sizes`` (None or empty to skip) are the
    session sizes in nodes for the owed-cost measurement, each with a
    ``backlog``-turn backlog, best of ``repeat`` samples; with ``on_disk``
    they are also written under ``state_dir`` as node files, to measure
    ``SessionCore.get_branch`` and
    :func:`~memory.simulate.baselines._scaling.owed_from_core` on a real core.
    Cost on this 2-core machine: about 0.2 s per 100-step session, plus
    about 40 s for the default sizes and 20-60 s more on disk (writing and
    cold-loading 100k node files), depending on load.
    """
    if state_dir is None:
        with tempfile.TemporaryDirectory(prefix="scriptorium-baselines-") as scratch:
            return run_baselines(
                seed=seed, sessions=sessions, turns=turns, batch=batch, collide=collide,
                scaling_sizes=scaling_sizes, backlog=backlog, repeat=repeat,
                race_nodes=race_nodes, on_disk=on_disk, state_dir=scratch,
            )
    workload = generate_workload(seed=seed, sessions=sessions, turns=turns)
    ledgers, figures = compare_ledgers(workload, batch=batch, collide=collide)
    report: dict[str, Any] = {
        "seed": seed,
        "workload": {"turns_per_session": turns, **figures},
        "ledgers": ledgers,
        "race_on_disk": race_on_disk(state_dir, seed=seed, nodes=race_nodes),
    }
    if scaling_sizes:
        sizes = tuple(sorted(scaling_sizes))
        report["owed_scaling"] = measure_owed_scaling(
            sizes, backlog=backlog, repeat=repeat, state_dir=state_dir if on_disk else None
        )
    return report


def _ms(value: float) -> str:
    return f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


_PARTS = (
    ("core_get_branch", "`SessionCore.get_branch` on disk (fingerprint check included)"),
    ("get_branch", "get_branch (every node from the root, as messages)"),
    ("records_filter", "records filter over the whole branch (SPEC §6.1)"),
    ("marker_walk", "marker walk over the records (`unwritten_turns`)"),
    ("cursor", "(a) cursor: whole owed computation"),
    ("external_set", "(c) external set: whole owed computation"),
    ("markers_full", "(d) markers over the whole branch: get_branch + records + walk"),
    ("markers_tail", "(d) markers, tail walk from the tip (`owed_from_tip`)"),
    ("core_tail", "(d) the same tail walk through `SessionCore` on disk (`owed_from_core`)"),
)


def render_baselines(report: dict[str, Any]) -> str:
    """The report as Markdown: the ledgers side by side, the race on disk, the owed-cost scaling."""
    work = report["workload"]
    kinds = ", ".join(f"{n} {k}" for k, n in work["kinds"].items())
    lines = [
        (f"Workload (seed {report['seed']}): {work['sessions']} sessions x "
        f"{work['turns_per_session']} steps, {work['nodes']} nodes, {work['live_tips']} live "
        f"tips, {work['recordable_turns']} recordable turns; {kinds}. Batches of "
        f"{work['batch_records']} records; {work['collision_rate']:.0%} of marked batches meet a "
        "concurrent stamp on their newest node."),
        "",
        ("| ledger | omitted turns | duplicated deliveries | lost metadata keys | batches "
        "| entries kept outside the sessions |"),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in LEDGERS:
        row = report["ledgers"][name]
        lines.append(
            f"| {_LABELS[name]} | {row['omitted']} | {row['duplicated']} | {row['lost_keys']} "
            f"| {row['batches']} | {row['entries_outside_sessions']} |"
        )
    race = report["race_on_disk"]
    lines += [
        "",
        (f"Lost-marker race on real node files ({race['nodes']} nodes, both components read "
        "before either writes):"),
        "",
        "| merged by | lost metadata keys | of which markers |",
        "|---|---:|---:|",
        (f"| naive read-modify-write | {race['naive_rmw']['lost_keys']} "
        f"| {race['naive_rmw']['lost_markers']} |"),
        (f"| the session's owner (`merge_node_metadata_batch`) "
        f"| {race['session_owner']['lost_keys']} | {race['session_owner']['lost_markers']} |"),
    ]
    scaling = report.get("owed_scaling")
    if scaling:
        sizes = [str(size) for size in scaling["sizes"]]
        lines += [
            "",
            (f"What a branch owes, as the session grows ({scaling['backlog_turns']}-turn backlog; "
            f"best of interleaved samples; ratio = {scaling['ratio_of']}, target <= "
            f"{scaling['target_ratio']}x):"),
            "",
            "| computation | " + " | ".join(f"{int(s):,} nodes" for s in sizes) + " | ratio |",
            "|---|" + "---:|" * (len(sizes) + 1),
        ]
        for key, label in _PARTS:
            if key not in scaling["ratios"]:
                continue
            cells = " | ".join(_ms(scaling["rows"][s][f"{key}_ms"]) for s in sizes)
            lines.append(f"| {label} | {cells} | {scaling['ratios'][key]:.2f}x |")
    return "\n".join(lines)
