"""The reference agent's metadata merge, as a second process: unlocked read-modify-write.

Told on stdin, a line at a time: ``read NODE`` reads that node's file (what
the agent then holds in memory); ``write`` writes back everything it read,
plus a key of its own (``json.dumps`` and a rename, no lock). Each command is
answered with a line "done" once done, so a test can put the runtime's marking
exactly between the read and the write.

Run: ``python _unlocked_agent.py HISTORY_DIR`` (no project imports).
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any


def agent_merges(history: str) -> None:
    """The command loop (runs in the second process)."""
    held: list[tuple[str, dict[str, Any]]] = []
    merges = 0
    for line in sys.stdin:
        command = line.split()
        if command[0] == "read":
            [path] = glob.glob(os.path.join(history, f"*-{command[1]}.json"))
            with open(path, "rb") as handle:
                held.append((path, json.loads(handle.read())))
            print("done", flush=True)
        elif command[0] == "write":
            for path, record in held:
                record["metadata"][f"agent_{merges}"] = merges
                temp = f"{path}.agent.tmp"
                with open(temp, "w", encoding="utf-8") as out:
                    out.write(json.dumps(record, ensure_ascii=False))
                os.replace(temp, path)
                merges += 1
            held.clear()
            print("done", flush=True)


if __name__ == "__main__":
    agent_merges(sys.argv[1])
