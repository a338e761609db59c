"""The key builders of API.md §1: SQL (``office.*``) and Python
(``controlplane.keys``) against the one shared vector file
``tests/vectors/keys.json`` (DOMAIN.md §3 vectors plus edge cases).

The SQL side evaluates every vector on one connection, one SELECT each, the
first time any SQL vector test runs (a fresh database per vector would cost a
clone each); every vector still is its own test and fails on its own.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg import sql

from controlplane import keys
from controlplane.errors import InvalidArgument

VECTOR_FILE = Path(__file__).parent / "vectors" / "keys.json"

# API.md §1: parameter names, order and types (binding).
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

PYTHON_BUILDERS: dict[str, Callable[..., str | None]] = {
    name: getattr(keys, name) for name in SIGNATURES
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


def python_args(vector: dict[str, Any]) -> dict[str, Any]:
    """The vector's arguments as Python values (timestamps become aware datetimes)."""
    types = dict(SIGNATURES[vector["function"]])
    return {
        name: datetime.fromisoformat(value)
        if value is not None and types[name] == "timestamp with time zone"
        else value
        for name, value in vector["args"].items()
    }


def check(vector: dict[str, Any], result: SqlResult) -> None:
    if "error" in vector:
        assert result.sqlstate == vector["error"], (
            f"{vector['name']}: expected SQLSTATE {vector['error']}, got {result}"
        )
        assert result.message is not None and vector["error_mentions"] in result.message
    else:
        assert result.sqlstate is None, f"{vector['name']}: unexpected error {result}"
        assert result.value == vector["expected"], vector["name"]


_sql_results: dict[str, SqlResult] = {}


def _sql_results_for_all(request: pytest.FixtureRequest) -> dict[str, SqlResult]:
    if not _sql_results:
        conn: psycopg.Connection[Any] = request.getfixturevalue("db")
        for vector in VECTORS:
            _sql_results[vector["name"]] = sql_call(conn, vector)
    return _sql_results


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


def test_vector_file_is_well_formed() -> None:
    names = _ids(VECTORS)
    assert len(names) == len(set(names))
    for vector in VECTORS:
        assert vector["function"] in SIGNATURES, vector["name"]
        params = [name for name, _ in SIGNATURES[vector["function"]]]
        required = params[:-1] if vector["function"] == "routine_key" else params
        assert set(required) <= set(vector["args"]) <= set(params), vector["name"]
        assert ("error" in vector) != ("expected" in vector), vector["name"]
    # every builder has value, null and (but for the two without ids) error vectors
    for function in SIGNATURES:
        mine = [v for v in VECTORS if v["function"] == function]
        assert any(v.get("expected") is not None for v in mine), function
        assert any("expected" in v and v["expected"] is None for v in mine), function
        if function not in ("second_precision_text", "routine_fingerprint"):
            assert any("error" in v for v in mine), function


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
def test_sql_vector(vector: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(vector, _sql_results_for_all(request)[vector["name"]])


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
def test_python_vector(vector: dict[str, Any]) -> None:
    builder = PYTHON_BUILDERS[vector["function"]]
    try:
        value = builder(**python_args(vector))
    except InvalidArgument as exc:
        result = SqlResult(sqlstate=exc.sqlstate, message=str(exc))
    else:
        result = SqlResult(value=value)
    check(vector, result)


def test_sql_functions_are_immutable_parallel_safe_and_pinned(db: psycopg.Connection[Any]) -> None:
    rows = db.execute(
        """
        SELECT p.proname, p.provolatile, p.proparallel, p.prosecdef, p.proisstrict,
               p.proconfig, p.proargnames,
               ARRAY(SELECT pg_catalog.format_type(t, NULL)
                       FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) AS t),
               pg_catalog.format_type(p.prorettype, NULL), p.pronargdefaults,
               pg_catalog.obj_description(p.oid, 'pg_proc')
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'office'::pg_catalog.regnamespace
           AND p.proname = ANY(%s)
        """,
        [list(SIGNATURES)],
    ).fetchall()
    by_name = {row[0]: row[1:] for row in rows}
    assert sorted(by_name) == sorted(SIGNATURES), "exactly one overload of each builder"
    for name, signature in SIGNATURES.items():
        (
            volatile,
            parallel,
            secdef,
            strict,
            config,
            argnames,
            argtypes,
            rettype,
            ndefaults,
            comment,
        ) = by_name[name]
        assert volatile == "i", name
        assert parallel == "s", name
        assert secdef is False, name
        assert strict is (name != "routine_key"), name
        assert config == ["search_path=pg_catalog, pg_temp"], name
        assert argnames == [n for n, _ in signature], name
        assert argtypes == [t for _, t in signature], name
        assert rettype == "text", name
        assert ndefaults == (1 if name == "routine_key" else 0), name
        assert comment, name


def test_python_signatures_match_sql() -> None:
    for name, signature in SIGNATURES.items():
        params = inspect.signature(PYTHON_BUILDERS[name]).parameters
        assert list(params) == [n for n, _ in signature], name
        defaults = [p for p in params.values() if p.default is not inspect.Parameter.empty]
        assert [p.name for p in defaults] == (["explicit_key"] if name == "routine_key" else [])


def test_each_office_role_may_execute_the_builders(db: psycopg.Connection[Any]) -> None:
    rows = db.execute(
        """
        SELECT r.rolname, p.proname,
               pg_catalog.has_function_privilege(r.rolname, p.oid, 'EXECUTE')
          FROM pg_catalog.pg_proc p
         CROSS JOIN pg_catalog.pg_roles r
         WHERE p.pronamespace = 'office'::pg_catalog.regnamespace
           AND p.proname = ANY(%s)
           AND r.rolname IN ('office_producer', 'office_worker', 'office_reader', 'office_admin')
        """,
        [list(SIGNATURES)],
    ).fetchall()
    assert len(rows) == 4 * len(SIGNATURES)
    assert all(allowed for _, _, allowed in rows), [r for r in rows if not r[2]]


# Inputs PostgreSQL cannot even express: each side refuses on its own terms.


def test_sql_infinite_tick_is_invalid_and_infinite_ts_renders_null(
    db: psycopg.Connection[Any],
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as raised:
        db.execute("SELECT office.routine_key('cron', 'routine-1', 'trigger-1', 'infinity', NULL)")
    assert raised.value.sqlstate == "22023"
    assert "claimed_tick" in str(raised.value)
    # to_char renders an infinite instant as NULL; the comparison helper follows it.
    row = db.execute("SELECT office.second_precision_text('infinity')").fetchone()
    assert row == (None,)


def test_sql_multidimensional_blocker_ids_are_invalid(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT office.blocker_digest('{{a,b},{c,d}}'::text[])")


def test_sql_blocker_digest_ignores_array_lower_bound(db: psycopg.Connection[Any]) -> None:
    row = db.execute(
        "SELECT office.blocker_digest('[0:1]={blocker-b,blocker-a}'::text[]),"
        "       office.blocker_digest('{blocker-a,blocker-b}'::text[])"
    ).fetchone()
    assert row is not None and row[0] == row[1]


@pytest.mark.parametrize(
    "call",
    [
        lambda: keys.second_precision_text(datetime(2026, 1, 1, 0, 10)),
        lambda: keys.routine_key("cron", "routine-1", "trigger-1", datetime(2026, 5, 10, 12), None),
        lambda: keys.assignment_key("task-1", "agent-A", 2**63),
        lambda: keys.assignment_key("task-1", "agent-A", True),
        lambda: keys.assignment_key("task\x00-1", "agent-A", 1),
        lambda: keys.blocker_digest("blocker-a"),
        lambda: keys.wake_operation_id("parent-1", "child-a:COMPLETED", "\x00"),
        lambda: keys.routine_fingerprint("\ud800", "", "agent-1"),
    ],
    ids=[
        "naive-ts",
        "naive-claimed-tick",
        "generation-beyond-bigint",
        "bool-generation",
        "nul-in-id",
        "text-as-blocker-ids",
        "nul-in-generation",
        "lone-surrogate",
    ],
)
def test_python_refuses_what_sql_cannot_receive(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert raised.value.sqlstate == "22023"


def test_python_datetime_zones_are_equivalent() -> None:
    utc = datetime(2026, 5, 10, 12, 0, 0, 999_999, tzinfo=UTC)
    other = utc.astimezone(timezone(timedelta(hours=-7)))
    assert keys.second_precision_text(other) == keys.second_precision_text(utc)
    assert keys.routine_key("cron", "r", "t", other, None) == keys.routine_key(
        "cron", "r", "t", utc, None
    )
