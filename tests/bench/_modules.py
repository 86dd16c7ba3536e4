"""One way for the tests to import a benchmark script: as the scripts import each other.

``bench/`` is not a package: its scripts run as ``python bench/x.py`` and
import their helpers as top-level modules (``from _harness import ...``).
The tests import them the same way, so a module is loaded once, under one
name, whichever test asks first.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py``, imported as the top-level module ``name``."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)
