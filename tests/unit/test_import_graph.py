"""The controlplane package has no import cycle, and no test module imports
another (pure Python, no server).

Every module is imported on its own, and the graph of its imports of other
controlplane modules - read with ``ast``, wherever in the module they are,
module level or inside a function - has no cycle. Exempt: imports under
``if TYPE_CHECKING:``, which never run. An import names the module it
imports: ``from controlplane.client import Office`` is an edge to the
package ``controlplane.client``, ``from controlplane.client import queries``
(a submodule) an edge to ``controlplane.client.queries``; a submodule's
implicit import of its own package is not an edge (the package's
``__init__`` re-exporting its submodules is not a cycle)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import controlplane

ROOT = Path(controlplane.__file__).parent


def module_name(path: Path) -> str:
    parts = ("controlplane", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(name: str) -> set[str]:
    """The controlplane modules ``name`` imports (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and type_checking_only(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {module for module in found if module in MODULES and module != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := walk(target)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)) is not None:
            return cycle
    return None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_the_import_graph_has_no_cycle() -> None:
    graph = {name: imports(name) for name in MODULES}
    assert find_cycle(graph) is None


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


# --- the tests: no test module imports another --------------------------------------

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(path: Path, root: Path = TESTS.parent) -> set[str]:
    """The ``test_*`` modules that the module at ``path`` (under ``root``, the
    directory holding the ``tests`` package) imports, relative imports resolved."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module.rpartition(".")[2].startswith("test_")}


def test_no_test_module_imports_another() -> None:
    # What several test modules share lives in tests/harness.py and
    # tests/scenarios/: importing a test module would also import its tests
    # into the importer's namespace, where pytest collects them a second time.
    importing = {
        str(path.relative_to(TESTS)): sorted(imported_test_modules(path))
        for path in sorted(TESTS.rglob("*.py"))
    }
    assert {path: found for path, found in importing.items() if found} == {}


def test_the_test_import_finder_finds_them(tmp_path: Path) -> None:
    sample = tmp_path / "tests" / "sql" / "test_sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text(
        "from tests.sql.test_tasks import call\n"
        "from . import test_runs_keys\n"
        "from ..scenarios import tasks\n"
        "import tests.harness\n"
    )
    assert imported_test_modules(sample, tmp_path) == {
        "tests.sql.test_tasks",
        "tests.sql.test_runs_keys",
    }
