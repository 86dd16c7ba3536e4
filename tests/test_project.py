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
# memory._errors (the package's one errors module). inspector (the web inspector)
# reads the runtime and the audit; cli is last: `scriptorium simulate` and
# `scriptorium inspect` are its commands.
MEMORY_LAYERS = ("ledger", "workspace", "recall", "writers", "consolidation", "maintenance",
                 "runtime", "importers", "mcp", "inspector", "simulate", "cli")


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




# Exceptions of memory defined outside memory/_errors.py, and why: none is raised
# to a caller of memory's Python API.
OUTSIDE_ERRORS = {
    # the command line's own exits (a message and an exit code), caught by its main()
    "memory.cli._cli_errors": {"CliError", "StateNotFoundError"},
    "memory.simulate._command": {"BaselinesMissingError", "EndpointUnreachable"},
    # the faults the stress harness injects into a run, and tells apart from real ones
    "memory.simulate._faults": {"InjectedIOError", "SimulatedCrash"},
    # a writer worker's crash, for its supervisor (logged, never a caller's error)
    "memory.runtime._pool": {"WriterCrashedError"},
    # what the model writer reads from the model; it turns each into a ModelWriterFailedError
    "memory.writers.model._edits": {"ActionsUnreadableError"},
    "memory.writers.model._wire": {"ResponseUnreadableError"},
}


def test_store_and_its_lowlevel_surface_are_apart() -> None:
    """Like actors.lowlevel: a name is in one surface, and the host's own in ``store``."""
    import store
    import store.lowlevel

    assert not set(store.__all__) & set(store.lowlevel.__all__)
    assert {"run_durable", "SessionLock", "Fingerprint", "walk_files", "state_path",
            "recover_dead_runtimes"} <= set(store.lowlevel.__all__)
    assert {"SessionCore", "SessionActor", "DurableFiles", "Node", "StoreError",
            "list_sessions", "node_to_message"} <= set(store.__all__)


def test_memorys_public_exceptions_live_in_its_errors_module() -> None:
    """One errors module per package (STYLE 5); memory exports what the README names."""
    memory = importlib.import_module("memory")
    assert {"BoundaryError", "BoundaryReport", "RecallError"} <= set(memory.__all__)
    for path in sorted((ROOT / "memory").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if name == "memory._errors":
            continue
        module = importlib.import_module(name)
        defined = {key for key, value in vars(module).items()
                   if isinstance(value, type) and issubclass(value, BaseException)
                   and value.__module__ == name and not key.startswith("_")}
        assert defined <= OUTSIDE_ERRORS.get(name, set()), (
            f"{name} defines {sorted(defined - OUTSIDE_ERRORS.get(name, set()))}; "
            "memory's exceptions live in memory/_errors.py")


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


# Modules that only re-export: every __init__, actors.lowlevel (the runner's surface) and
# store.lowlevel (the store's tools memory builds on: the durable seam, walks, formats).
INITS = (*PACKAGES, *(f"memory.{layer}" for layer in MEMORY_LAYERS), "actors.lowlevel",
         "store.lowlevel")


@pytest.mark.parametrize("package", INITS)
def test_init_only_reexports_what_all_names(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", [])
    assert exported, f"{package} names its exports in __all__"
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ names {name!r}, which is missing"
    init_path = Path(str(module.__file__))
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


def test_the_packages_tests_and_benchmarks_type_check_strictly() -> None:
    """Plain ``mypy`` (the pyproject config, as a developer runs it) covers tests and bench too."""
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert mypy["strict"] is True
    assert {*PACKAGES, "tests", "bench/*.py"} <= set(mypy["files"])
    result = _tool("mypy")
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


def _module_cycle(folder: Path) -> list[str] | None:
    """An import cycle among the modules of one package folder (``TYPE_CHECKING`` included)."""
    prefix = ".".join(folder.relative_to(ROOT).parts)
    modules = {f"{prefix}.{p.stem}" if p.stem != "__init__" else prefix: p
               for p in folder.glob("*.py")}
    edges = {name: sorted(m for m in _imported_modules(path) if m in modules and m != name)
             for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in edges[name]:
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[name] = 2
        return None

    for name in sorted(modules):
        if name not in state and (cycle := visit(name)) is not None:
            return cycle
    return None


# actors/ is left out for now: its _actor, _ref and _cell import each other (the
# kernel's part of issue 11).
FOLDERS = ("supervisors", "store", *(f"memory/{layer}" for layer in MEMORY_LAYERS))


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_import_cycle_inside_a_package(folder: str) -> None:
    """Each child of the runtime gets a narrow Protocol, not the runtime: nothing imports back."""
    cycle = _module_cycle(ROOT / folder)
    assert cycle is None, f"{folder}/ imports in a circle: {' -> '.join(cycle or [])}"


def _store_patches(path: Path) -> list[str]:
    """Where a benchmark reaches into the store: subclasses (but DurableFiles), patched members."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.asname or alias.name for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "store"
             for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += [f"class {node.name}({base.id})" for base in node.bases
                      if isinstance(base, ast.Name) and base.id in names
                      and base.id != "DurableFiles"]
        targets = node.targets if isinstance(node, ast.Assign) else []
        found += [f"{t.value.id}.{t.attr} = ..." for t in targets if isinstance(t, ast.Attribute)
                  and isinstance(t.value, ast.Name) and t.value.id in names]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "setattr" and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id in names):
            found.append(f"setattr({node.args[0].id}, ...)")
    return found


def test_benchmarks_measure_the_store_from_outside() -> None:
    """No hook in store for a benchmark: bench/ uses the public API and the durable seam only."""
    for path in sorted((ROOT / "bench").rglob("*.py")):
        patches = _store_patches(path)
        assert not patches, (f"{path.relative_to(ROOT)} reaches into the store ({patches}); "
                             "measure through the public API or a DurableFiles subclass")


# Test files exempt from the naming rule below, each with the reason.
TEST_NAMING_EXEMPT = {
    "tests/test_project.py": "the project's promises about itself: layout, lint, types, wheel",
    "tests/test_readme.py": "every ```python block of README.md and docs/*.md runs as written",
}


def _module_names(folder: Path) -> set[str]:
    """What a test file in the mirror of ``folder`` may be named after: its modules and packages."""
    modules = {p.stem.removeprefix("_") for p in folder.glob("*.py") if p.stem != "__init__"}
    return modules | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_every_test_file_is_named_after_the_module_it_tests() -> None:
    """``tests/<folder>/test_<module>[_<aspect>].py`` tests ``<folder>/[_]<module>.py``.

    A newcomer looking for the tests of ``memory/runtime/_session_actor.py``
    finds them in ``tests/memory/runtime/test_session_actor*.py``; a test file
    in ``tests/`` itself tests a module of ``tests/`` (its tools).
    """
    tests = ROOT / "tests"
    for path in sorted(tests.rglob("test_*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in TEST_NAMING_EXEMPT:
            continue
        mirrored = path.parent.relative_to(tests)
        folder = ROOT / mirrored if mirrored.parts else tests
        assert folder.is_dir(), f"{relative}: its folder mirrors {mirrored}/, which does not exist"
        name = path.stem.removeprefix("test_")
        modules = _module_names(folder)
        assert any(name == m or name.startswith(f"{m}_") for m in modules), (
            f"{relative} names no module of {folder.relative_to(ROOT).as_posix() or '.'}/; "
            f"name it test_<module>.py or test_<module>_<aspect>.py after the module it tests, "
            f"one of {sorted(modules)}")
    for relative in TEST_NAMING_EXEMPT:
        assert (ROOT / relative).is_file(), f"TEST_NAMING_EXEMPT lists {relative}, which is gone"


def test_no_test_module_imports_another() -> None:
    """Helpers shared by tests live in conftest.py, tests/faults.py or a ``_``-named module.

    A test module imported by another runs its own module-level code in both,
    hides which helpers are shared, and ties the two files' names together.
    """
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module or ''}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                assert not any(part.startswith("test_") for part in name.split(".")), (
                    f"{path.relative_to(ROOT)}:{node.lineno} imports {name}, a test module; "
                    "move what it shares to conftest.py, tests/faults.py or a _helpers module")
