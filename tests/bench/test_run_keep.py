"""``bench/run.py --keep``: one RESULTS.md from several runs, each benchmark from its latest run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench._modules import bench_module

run = bench_module("run")
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmarks_not_run_now_come_from_the_kept_outcomes_in_table_order(
    tmp_path: Path,
) -> None:
    every = run._benches(sys.executable)
    first, second, third = every[0], every[1], every[2]
    kept = tmp_path / "outcomes.json"
    kept.write_text(json.dumps([
        {"name": third.name, "status": "ok", "seconds": 3.0, "data": {"n": 3}, "detail": ""},
        {"name": first.name, "status": "ok", "seconds": 1.0, "data": {"n": 1}, "detail": ""},
        {"name": "a benchmark since removed", "status": "ok", "seconds": 9.0, "data": {},
         "detail": ""},
    ]), encoding="utf-8")
    loaded = run._load_kept(str(kept), every, {first.name})  # first runs again now
    assert [(o.bench.name, o.data) for o in loaded] == [(third.name, {"n": 3})]
    fresh = run.Outcome(first, "ok", 0.5, {"n": "new"})
    also = run.Outcome(second, "failed", 0.1, None, "boom")
    ordered = run._in_bench_order(every, [*loaded, also, fresh])
    assert [o.bench.name for o in ordered] == [first.name, second.name, third.name]
    assert ordered[0].data == {"n": "new"}  # this run's outcome, not the kept one


def test_without_a_kept_file_nothing_is_taken(tmp_path: Path) -> None:
    every = run._benches(sys.executable)
    assert run._load_kept(None, every, set()) == []
    assert run._load_kept(str(tmp_path / "absent.json"), every, set()) == []


def test_an_unknown_benchmark_name_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, "bench/run.py", "--only", "actorz", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no benchmark named 'actorz'" in done.stderr
    assert not out.exists()


def test_render_writes_the_kept_outcomes_alone(tmp_path: Path) -> None:
    every = run._benches(sys.executable)
    kept = tmp_path / "outcomes.json"
    kept.write_text(json.dumps([{"name": every[0].name, "status": "failed", "seconds": 1.0,
                                 "data": None, "detail": "boom"}]), encoding="utf-8")
    out = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, "bench/run.py", "--render", "--keep", str(kept),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"## {every[0].name}" in out.read_text(encoding="utf-8") and "boom" in out.read_text(
        encoding="utf-8")
