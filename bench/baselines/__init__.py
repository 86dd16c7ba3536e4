"""The ledger baselines of ``scriptorium simulate --compare`` and ``bench/run.py`` (issue 6).

Benchmark code, not part of the installed package: ``--compare`` loads this
folder from a source checkout (``memory/simulate/_command.py``, ``BASELINES``).
Layout: ``_workload`` the seeded forking workload; ``_ledgers`` the four
ledgers; ``_race`` the lost-marker race on real files; ``_scaling`` the
owed-cost scaling; ``_report`` runs them all and renders the tables.
"""

from ._report import render_baselines as render_baselines
from ._report import run_baselines as run_baselines

__all__ = ["render_baselines", "run_baselines"]
