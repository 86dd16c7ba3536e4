"""The project's promises about itself: layering, exports, the two README commands."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "supervisors", "store", "memory")
# SPEC §2: each package may import only those listed before it in this table.
ALLOWED = {
    "actors": set(),
    "supervisors": {"actors"},
    "store": {"actors"},
    "memory": {"actors", "supervisors", "store"},
}
# memory's folders in import order: each may import only those before it, and
# memory._errors (the package's one errors module). cli is last: `scriptorium
# simulate` is one of its commands.
MEMORY_LAYERS = ("ledger", "workspace", "recall", "writers", "maintenance", "runtime", "simulate", "cli")


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_flow_one_way(package: str) -> None:
    for module in sorted((ROOT / package).rglob("*.py")):
        imported = _imported_packages(module) - {package}
        assert imported <= ALLOWED[package], (
            f"{module.relative_to(ROOT)} imports {sorted(imported - ALLOWED[package])}; "
            f"{package}/ may import only {sorted(ALLOWED[package]) or 'anyio'} (SPEC §2)"
        )


def _imported_modules(path: Path) -> set[str]:
    """Every module name ``path`` imports, relative ones resolved, under ``TYPE_CHECKING`` too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]  # for __init__ too
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            # from store import _durable: a private name may be a module
            found.update(f"{module}.{alias.name}" for alias in node.names
                         if alias.name.startswith("_"))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_another_packages_private_modules(package: str) -> None:
    """A package reaches another through its __init__ only (tests and bench/ may look inside)."""
    for module in sorted((ROOT / package).rglob("*.py")):
        for name in sorted(_imported_modules(module)):
            parts = name.split(".")
            if parts[0] in PACKAGES and parts[0] != package:
                assert not any(part.startswith("_") for part in parts[1:]), (
                    f"{module.relative_to(ROOT)} imports {name}, a private module of "
                    f"{parts[0]}; export the name from {parts[0]}/__init__.py")


def test_memory_is_its_folders_and_one_errors_module() -> None:
    memory = ROOT / "memory"
    assert sorted(p.name for p in memory.glob("*.py")) == ["__init__.py", "_errors.py"]
    folders = {p.name for p in memory.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(MEMORY_LAYERS)
    assert not {m for m in _imported_modules(memory / "_errors.py") if m.startswith("memory")}




@pytest.mark.parametrize("layer", MEMORY_LAYERS)
def test_memory_folders_import_one_way(layer: str) -> None:
    allowed = set(MEMORY_LAYERS[:MEMORY_LAYERS.index(layer) + 1]) | {"_errors"}
    for module in sorted((ROOT / "memory" / layer).rglob("*.py")):
        for name in sorted(_imported_modules(module)):
            parts = name.split(".")
            if parts[0] != "memory":
                continue
            assert len(parts) > 1, (
                f"{module.relative_to(ROOT)} imports the memory package itself, which imports "
                "every folder; import from the folder instead")
            assert parts[1] in allowed, (
                f"{module.relative_to(ROOT)} imports {name}; in memory, memory/{layer}/ may "
                f"import only memory._errors and memory/{{{','.join(sorted(allowed - {'_errors'}))}}}")


INITS = (*PACKAGES, *(f"memory.{layer}" for layer in MEMORY_LAYERS))


@pytest.mark.parametrize("package", INITS)
def test_init_only_reexports_what_all_names(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", [])
    assert exported, f"{package} names its exports in __all__"
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ names {name!r}, which is missing"
    init_path = ROOT / package.replace(".", "/") / "__init__.py"
    init = ast.parse(init_path.read_text(encoding="utf-8"))
    for node in init.body:
        assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Expr)), (
            f"{init_path.relative_to(ROOT)} should only re-export; found {type(node).__name__}"
        )


def test_ci_runs_the_readme_test_line_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    commands = [line for line in readme[:8] if line.startswith("python3 ")]
    assert len(commands) == 2, "README opens with two set-up lines: run the main job, run tests"
    assert "scriptorium simulate" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[1] in ci, ".ci/run must run the README's test line verbatim"


def _tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_packages_type_check_strictly() -> None:
    result = _tool("mypy", "--strict", *PACKAGES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_lint_clean() -> None:
    result = _tool("ruff", "check", *PACKAGES, "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_wheel_holds_every_subpackage_and_nothing_else() -> None:
    """A non-editable install (README line 1) ships exactly the packages' folders."""
    setuptools = pytest.importorskip("setuptools")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(setuptools.find_packages(where=str(ROOT), include=include))
    expected = {".".join(init.parent.relative_to(ROOT).parts)
                for package in PACKAGES for init in (ROOT / package).rglob("__init__.py")}
    assert shipped == expected
    assert config["project"]["scripts"]["scriptorium"] == "memory.cli:main"
    assert callable(importlib.import_module("memory.cli").main)
