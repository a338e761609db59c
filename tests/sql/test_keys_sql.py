"""The key builders of docs/api.md §1 in SQL (``office.*``) against the one shared
vector file ``tests/vectors/keys.json`` (the Python side is
``tests/unit/test_keys.py``), their catalog entries and grants.

The SQL side evaluates every vector on one connection, one SELECT each, the
first time any SQL vector test runs (a fresh database per vector would cost a
clone each); every vector still is its own test and fails on its own.
"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
import pytest

from tests.scenarios.keys import (
    DEFAULTED,
    SIGNATURES,
    VECTORS,
    SqlResult,
    check,
    sql_call,
    vector_ids,
)

_sql_results: dict[str, SqlResult] = {}


def _sql_results_for_all(request: pytest.FixtureRequest) -> dict[str, SqlResult]:
    if not _sql_results:
        conn: psycopg.Connection[Any] = request.getfixturevalue("db")
        for vector in VECTORS:
            _sql_results[vector["name"]] = sql_call(conn, vector)
    return _sql_results


@pytest.mark.parametrize("vector", VECTORS, ids=vector_ids(VECTORS))
def test_sql_vector(vector: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(vector, _sql_results_for_all(request)[vector["name"]])


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
        assert ndefaults == len(DEFAULTED[name]), name
        assert comment, name


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
