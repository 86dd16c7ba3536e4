"""The reference agent's metadata merge, as a second process: unlocked read-modify-write.

It reads a node file, waits ``HOLD_SECONDS``, and writes back what it read
plus a key of its own (``json.dumps`` and a rename, no lock), in a loop over
the four newest node files. On SIGTERM it prints how many merges it made.

Run: ``python _unlocked_agent.py HISTORY_DIR HOLD_SECONDS`` (no project imports).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time


def agent_merges(history: str, hold: float) -> None:
    """The unlocked read-modify-write loop (runs in the second process)."""
    rng = random.Random(os.getpid())
    merges = 0

    def stop(*_: object) -> None:
        sys.stdout.write(f"{merges}\n")
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        names = sorted(n for n in os.listdir(history) if n.endswith(".json"))
        if not names:
            time.sleep(0.001)
            continue
        path = os.path.join(history, rng.choice(names[-4:]))
        try:
            with open(path, "rb") as handle:
                record = json.loads(handle.read())
        except (OSError, ValueError):
            continue
        time.sleep(hold)
        record["metadata"][f"agent_{merges}"] = merges
        temp = f"{path}.agent.tmp"
        with open(temp, "w", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False))
        os.replace(temp, path)
        merges += 1


if __name__ == "__main__":
    agent_merges(sys.argv[1], float(sys.argv[2]))


if __name__ == "__main__":
    agent_merges(sys.argv[1], float(sys.argv[2]))
