"""``scriptorium simulate --compare`` after the README's own install (``pip install '.[trio]'``).

The baselines used to live in ``bench/baselines``, which a non-editable
install does not ship, so ``--compare`` exited 2 there. They are now a
package of ``memory``; these tests check the install ships them and that
the command finds them there, not in a checkout's bench/.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from memory.simulate import _command as simulate_command

ROOT = Path(__file__).resolve().parents[3]


def test_the_install_ships_the_baselines() -> None:
    setuptools = pytest.importorskip("setuptools")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(setuptools.find_packages(where=str(ROOT), include=include))
    assert "memory.simulate.baselines" in shipped
    assert not {name for name in shipped if name.split(".")[0] == "bench"}


def test_compare_loads_the_installed_package_not_a_checkout_folder() -> None:
    baselines = simulate_command.load_baselines()
    assert baselines is importlib.import_module("memory.simulate.baselines")
    assert Path(str(baselines.__file__)).parent == ROOT / "memory" / "simulate" / "baselines"
    assert callable(baselines.run_baselines) and callable(baselines.render_baselines)
    assert not (ROOT / "bench" / "baselines").exists(), "one home: memory/simulate/baselines"
