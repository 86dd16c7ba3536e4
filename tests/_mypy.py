"""Run strict mypy on a small program, for the tests that prove a type error is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def marked_lines(program: str) -> set[int]:
    """The lines of ``program`` marked ``# error``: where mypy must report, and only there."""
    return {line for line, text in enumerate(program.splitlines(), 1) if "# error" in text}


def mypy_report(program: Path) -> tuple[set[int], list[str]]:
    """The lines mypy --strict reports an error on in ``program``, and all its lines on it."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if program.name in line]
    return {int(line.split(":")[1]) for line in lines if ": error: " in line}, lines
