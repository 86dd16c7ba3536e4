"""bench/consolidate.py's verdicts: each target of issue 23 judged from the figures, not assumed."""

from __future__ import annotations

from typing import Any

from tests.bench._modules import bench_module

consolidate = bench_module("consolidate")


def _result(after_bytes: int, kept: bool, answer_500: float, local_s: float) -> dict[str, Any]:
    recall = {"evidence": {"250": 0.5, "500": 0.6, "1000": 0.7},
              "answer": {"250": 0.5, "500": 0.8, "1000": 0.9}}
    after = {"evidence": dict(recall["evidence"]),
             "answer": {**recall["answer"], "500": answer_500}}
    return {
        "before": {"bytes": 1000, "paragraphs": 10, "files": 1},
        "after": {"bytes": after_bytes, "paragraphs": 8, "files": 1},
        "sources_before": 5, "sources_after": 5 if kept else 4, "sources_kept": kept,
        "pass_seconds_per_1000_paragraphs": 1.0, "write_cycle_s": 1.0, "local_pass_s": local_s,
        "recall_before": recall, "recall_after": after,
        "model": {"after": {"bytes": 990, "paragraphs": 9, "files": 1}, "pass_seconds": 0.1,
                  "sources_kept": True, "recall_after": recall},
    }


def _verdicts(result: dict[str, Any]) -> dict[str, bool | None]:
    return {row.figure: row.met for row in consolidate.rows(result)}


def test_every_target_met() -> None:
    verdicts = _verdicts(_result(700, True, 0.8, 5.0))
    assert all(met is not False for met in verdicts.values()), verdicts


def test_each_target_missed_is_said() -> None:
    verdicts = _verdicts(_result(800, False, 0.79, 11.0))
    missed = {figure for figure, met in verdicts.items() if met is False}
    assert missed == {"topics smaller after a pass (bytes)", "cited sources kept",
                      "local pass after one batch / that batch's write cycle",
                      "answer recall@500 after (before 0.800)"}
