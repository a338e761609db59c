"""The key builders' shared vectors (``tests/vectors/keys.json``), their
signatures, and one SQL call per vector: what the key tests (both sides) and
the hardening tests check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

VECTOR_FILE = Path(__file__).parents[1] / "vectors" / "keys.json"

# docs/api.md §1: parameter names, order and types (binding).
SIGNATURES: dict[str, list[tuple[str, str]]] = {
    "assignment_key": [("task_id", "text"), ("agent_profile_id", "text"), ("generation", "bigint")],
    "blocker_digest": [("blocker_ids", "text[]")],
    "blockers_resolved_key": [("blocked_task_id", "text"), ("blocker_ids", "text[]")],
    "comment_key": [("comment_id", "text"), ("agent_profile_id", "text")],
    "wake_operation_id": [
        ("parent_task_id", "text"),
        ("child_set_key", "text"),
        ("generation", "text"),
    ],
    "second_precision_text": [("ts", "timestamp with time zone")],
    "routine_fingerprint": [("title", "text"), ("description", "text"), ("assignee", "text")],
    "routine_key": [
        ("source", "text"),
        ("routine_id", "text"),
        ("trigger_id", "text"),
        ("claimed_tick", "timestamp with time zone"),
        ("routine_run_id", "text"),
        ("explicit_key", "text"),
    ],
}

# How a vector argument reaches SQL: a schema-qualified cast, so the call
# itself does not depend on the caller's search_path (see test_hardening).
_SQL_CASTS = {
    "text": "pg_catalog.text",
    "text[]": "pg_catalog.text[]",
    "bigint": "pg_catalog.int8",
    "timestamp with time zone": "pg_catalog.timestamptz",
}


def load_vectors() -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads(VECTOR_FILE.read_text(encoding="utf-8"))["vectors"]
    return vectors


VECTORS = load_vectors()


@dataclass(frozen=True)
class SqlResult:
    value: str | None = None
    sqlstate: str | None = None
    message: str | None = None


def sql_call(conn: psycopg.Connection[Any], vector: dict[str, Any]) -> SqlResult:
    """One SELECT of ``office.<function>`` in named notation with the vector's
    arguments, under the vector's session TimeZone (if any)."""
    function = vector["function"]
    types = dict(SIGNATURES[function])
    args: dict[str, Any] = vector["args"]
    call = sql.SQL("SELECT office.{}({})").format(
        sql.Identifier(function),
        sql.SQL(", ").join(
            sql.SQL("{} => %s::{}").format(sql.Identifier(name), sql.SQL(_SQL_CASTS[types[name]]))
            for name in args
        ),
    )
    if vector.get("timezone"):
        conn.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(vector["timezone"])))
    try:
        row = conn.execute(call, list(args.values())).fetchone()
    except psycopg.Error as exc:
        return SqlResult(sqlstate=exc.sqlstate, message=str(exc))
    finally:
        if vector.get("timezone"):
            conn.execute("RESET TimeZone")
    assert row is not None
    return SqlResult(value=row[0])


def check(vector: dict[str, Any], result: SqlResult) -> None:
    if "error" in vector:
        assert result.sqlstate == vector["error"], (
            f"{vector['name']}: expected SQLSTATE {vector['error']}, got {result}"
        )
        assert result.message is not None and vector["error_mentions"] in result.message
    else:
        assert result.sqlstate is None, f"{vector['name']}: unexpected error {result}"
        assert result.value == vector["expected"], vector["name"]


def vector_ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]
