"""Both directions of the marker race, measured with two real processes on one node file.

Issue 10 item 4. The reference agent merges node metadata with an unlocked
read-modify-write (read the file, add its key, ``atomic_write_text``), so
neither side's lock helps: each can drop a key the other wrote in between.
Here a scriptorium process merges 300 keys of its own into one node through
:class:`store.SessionCore` (``merge_node_metadata_batch``, real fsyncs),
while a second process does the agent's 300 unlocked merges of its own keys
into the same node, both started together. At the end the node file is
read and each side's lost keys counted:

* ``agent keys lost``: the agent wrote them, our merge overwrote them (our
  direction: the window between our read and our rename);
* ``our keys lost``: we wrote them, the agent's write dropped them (its
  direction, which no change on our side can close; lost markers are
  re-marked by the repair of issue 10 item 4).

``--code DIR`` runs the scriptorium side on another checkout (e.g. main
exported to /tmp) to compare before and after.

Run: ``python bench/marker_race.py [--runs 5] [--merges 300] [--code DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODE = "n0"

OURS = """
import sys, time
from store import SessionCore
state, merges, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
core = SessionCore.open(state, "race")
while time.time() < start:
    pass
began = time.perf_counter()
for i in range(merges):
    core.merge_node_metadata_batch({"n0": {f"ours_{i}": i}})
print(time.perf_counter() - began)
core.close()
"""

AGENT = """
import json, os, sys, time
path, merges, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pause = float(sys.argv[4])
while time.time() < start:
    pass
began = time.perf_counter()
for i in range(merges):
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    record["metadata"] = {**record.get("metadata", {}), f"agent_{i}": i}
    temp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.agent-tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False))
    os.replace(temp, path)
    if pause:
        time.sleep(pause)
print(time.perf_counter() - began)
"""


def one_run(code: Path, merges: int, agent_pause: float) -> dict[str, float]:
    """One race on a fresh state directory; returns both sides' losses and durations."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    with tempfile.TemporaryDirectory(prefix="marker-race-") as state:
        subprocess.run([sys.executable, "-c", (
            "import sys; from store import SessionCore\n"
            "core = SessionCore.create(sys.argv[1], 'race')\n"
            "core.append({'id': 'n0', 'content': 'the node both sides merge into'})\n"
            "core.close()"), state], env=env, check=True, cwd=code)
        (name,) = os.listdir(os.path.join(state, "sessions", "race", "history"))
        path = os.path.join(state, "sessions", "race", "history", name)
        start = str(time.time() + 1.0)  # both spin until then, so they start together
        ours = subprocess.Popen([sys.executable, "-c", OURS, state, str(merges), start],
                                env=env, cwd=code, stdout=subprocess.PIPE, text=True)
        agent = subprocess.Popen([sys.executable, "-c", AGENT, path, str(merges), start,
                                  str(agent_pause)], stdout=subprocess.PIPE, text=True)
        ours_seconds = float(ours.communicate()[0])
        agent_seconds = float(agent.communicate()[0])
        if ours.returncode or agent.returncode:
            raise SystemExit(f"a racer failed: ours {ours.returncode}, agent {agent.returncode}")
        with open(path, encoding="utf-8") as handle:
            metadata = json.load(handle)["metadata"]
    return {
        "agent_keys_lost": sum(f"agent_{i}" not in metadata for i in range(merges)),
        "our_keys_lost": sum(f"ours_{i}" not in metadata for i in range(merges)),
        "ours_seconds": ours_seconds,
        "agent_seconds": agent_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--merges", type=int, default=300)
    parser.add_argument("--code", type=Path, default=REPO,
                        help="checkout whose store/ the scriptorium side runs (default: this one)")
    parser.add_argument("--agent-pause", type=float, default=0.0,
                        help="seconds the agent sleeps between its merges")
    args = parser.parse_args()
    print(f"code: {args.code.resolve()}  merges per side: {args.merges}")
    for run in range(args.runs):
        result = one_run(args.code.resolve(), args.merges, args.agent_pause)
        print(f"run {run + 1}: agent keys lost {result['agent_keys_lost']:4d}/{args.merges}  "
              f"our keys lost {result['our_keys_lost']:4d}/{args.merges}  "
              f"(ours {result['ours_seconds']:.2f} s, agent {result['agent_seconds']:.2f} s)",
              flush=True)


if __name__ == "__main__":
    main()
