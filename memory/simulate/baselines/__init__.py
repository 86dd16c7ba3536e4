"""The ledger baselines of ``scriptorium simulate --compare`` and ``bench/run.py`` (issue 6).

Installed with the package, so ``--compare`` works after ``pip install``
(it imports them when asked: ``memory/simulate/_command.py``); ``bench/run.py``
and ``tests/bench`` import them from here.
Layout: ``_workload`` the seeded forking workload; ``_ledgers`` the four
ledgers; ``_race`` the lost-marker race on real files; ``_scaling`` the
owed-cost scaling; ``_report`` runs them all and renders the tables.
"""

from ._report import render_baselines as render_baselines
from ._report import run_baselines as run_baselines

__all__ = ["render_baselines", "run_baselines"]
