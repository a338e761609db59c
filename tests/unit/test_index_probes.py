"""Each "does anything need this?" probe of the SQL is the predicate of a
partial index, word for word (pure Python, no server).

claim_run, enqueue_run and enqueue_runs ask ``EXISTS (SELECT FROM office.T p
WHERE ...)`` with no other condition before they take a governed path: with
nothing to find that is one probe of an empty partial index, which the
planner only uses while the probe's predicate implies the index's. The C
definitions ask the same question of the index by name (``index_has_entry``),
so the index is where the rule lives and every SQL probe is held to it
here: a probe whose predicate drifts from its index would still be right,
but would read the whole table on every call."""

from __future__ import annotations

import re
from pathlib import Path

SQL = Path(__file__).resolve().parents[2] / "sql"
SOURCES = {path.name: path.read_text() for path in sorted(SQL.glob("[0-9][0-9]_*.sql"))}

PARTIAL_INDEX = re.compile(
    r"CREATE (?:UNIQUE )?INDEX (\w+)\s+ON office\.(\w+)\s*(?:USING \w+\s*)?\([^;]*?\)\s*"
    r"WHERE ([^;]+);",
)
# An unscoped existence probe: the alias p, a predicate of p's columns alone.
PROBE = re.compile(r"EXISTS \(SELECT FROM office\.(\w+) p\s+WHERE ((?:[^()]|\([^()]*\))+?)\)")


def normal(predicate: str) -> str:
    words = re.sub(r"\bp\.", "", predicate)
    words = re.sub(r"\s+", " ", words).strip()
    return words[1:-1] if words.startswith("(") and words.endswith(")") else words


def partial_indexes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for text in SOURCES.values():
        for _, table, predicate in PARTIAL_INDEX.findall(text):
            found.setdefault(table, set()).add(normal(predicate))
    return found


def probes() -> list[tuple[str, int, str, str]]:
    found = []
    for name, text in SOURCES.items():
        for match in PROBE.finditer(text):
            predicate = match.group(2)
            if re.search(r"\b(?:office\.|v_|[a-z_]+\.\w+\s*=\s*[a-z_]+\.)", predicate):
                continue  # scoped to a row of the caller's: not a whole-table question
            line = text.count("\n", 0, match.start()) + 1
            found.append((name, line, match.group(1), normal(predicate)))
    return found


def test_the_probes_are_found() -> None:
    # The hold-policy probe of enqueue_run, enqueue_runs and claim_run, the
    # budget probe of heartbeat_run and the priority probe of claim_run.
    tables = [table for _, _, table, _ in probes()]
    assert tables.count("wake_policies") >= 4 and "runs" in tables, probes()


def test_each_probe_is_the_predicate_of_a_partial_index_of_its_table() -> None:
    indexes = partial_indexes()
    drifted = [
        f"{name}:{line}: office.{table} WHERE {predicate}"
        for name, line, table, predicate in probes()
        if predicate not in indexes.get(table, set())
    ]
    assert not drifted, f"probes no partial index answers: {drifted}; indexes: {indexes}"
