"""Where the reference agent's sample state lives, and a writable copy of it.

The checkout has ``shared/`` beside it (SPEC: ``fixtures/openprogram-sample``),
read-only: tests that write copy it first.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "openprogram-sample"


def copy_fixture(target: Path, part: str = "") -> Path:
    """Copy the fixture (or its ``part``, e.g. ``memory``) to ``target`` with owner write bits.

    The original has none.
    """
    shutil.copytree(FIXTURE / part, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return target
