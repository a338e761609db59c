"""No raw SQL in the control plane outside its query modules (pure Python,
no server).

Every statement Python sends for the office API, the daemon, the demo, the
doctor and the dashboard is a named :class:`~controlplane.client.queries.Query`
of ``controlplane/client/queries/`` (docs/architecture.md, "The client's SQL").
This reads every other controlplane module with ``ast`` and fails on a string
constant - a plain one, one part of an f-string, implicitly concatenated ones
as one - that starts like a statement. Messages that quote SQL for an
operator (a finding's fix, a CLI help text) start with words of their own and
pass."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import controlplane

ROOT = Path(controlplane.__file__).parent
QUERIES = ROOT / "client" / "queries"

#: How a statement starts (the keywords as the project writes them: upper case).
STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CALL)\b")

#: Modules that must keep their own SQL: administration, not office API calls.
ALLOWED = {
    # Session set-up of officectl's connections and the function probes of
    # its commands (``to_regprocedure``), before any client exists.
    "cli/base.py": "session set-up and function probes",
    # Shard set-up of a cluster: extensions, foreign servers, user mappings.
    "scaleout/cluster.py": "shard set-up",
    # ``officectl cluster move``: copying a partition's rows between shards.
    "scaleout/partition_move.py": "a partition's rows copied between shards",
    # Its fence: the sessions that could still write the partition, ended.
    "scaleout/partition_fence.py": "a moved partition's source fenced",
    # ``officectl db``: creating the embedded database and its extension.
    "embedded.py": "embedded database set-up",
    # yoyo's connection set-up and the extension-or-migrations decision.
    "migrate.py": "schema migration",
    # The proxy script's generator: it reads a shard's catalog and writes
    # SQL text (the PL/Proxy functions), which is its product.
    "scaleout/proxy.py": "the proxy script's generator",
    "scaleout/proxy_wrappers.py": "the proxy script's generator: one wrapper's SQL",
}


def statements(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that start like a SQL statement."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and STATEMENT.match(node.value)
    ]


def modules() -> list[Path]:
    return [path for path in sorted(ROOT.rglob("*.py")) if QUERIES not in path.parents]


def test_no_module_outside_the_query_modules_holds_a_statement() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}": text[:60]
        for path in modules()
        if str(path.relative_to(ROOT)) not in ALLOWED
        for line, text in statements(path)
    }
    assert found == {}


def test_the_allow_list_names_modules_that_still_hold_sql() -> None:
    # An entry whose module no longer sends SQL of its own is stale: remove it.
    for name in ALLOWED:
        assert statements(ROOT / name), name


def test_the_scan_finds_a_statement(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'A = "SELECT 1"\nB = f"UPDATE office.runs SET x = {1}"\n'
        'C = ("WITH x AS (SELECT 1)" " SELECT * FROM x")\n'
        'D = "Delete finished runs"\nE = "fix: SELECT office.release_poison(...)"\n'
    )
    assert sorted(line for line, _ in statements(probe)) == [1, 2, 3]
