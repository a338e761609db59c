"""Hardening of the office schema, checked in the catalog so that it covers
every function and table present now and added later.

(a) a hostile schema on the caller's search_path cannot change what the key
    builders return (and would change an unpinned expression);
(b) every function in schema office pins search_path and is not executable by
    PUBLIC;
(c) PUBLIC can neither use nor create in schema office and has no privilege on
    any of its tables, views or sequences;
(d) the four roles exist and office_admin holds the other three.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.scenarios.hostile import HOSTILE_OBJECTS, HOSTILE_PATH
from tests.scenarios.keys import VECTORS, check, sql_call

OFFICE_ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")
PINNED = "search_path=pg_catalog, pg_temp"

# One unpinned expression per hostile object: under the hostile search_path
# each one must come out different, or the hostile schema proves nothing.
UNPINNED_EXPRESSIONS = [
    "pg_catalog.encode(sha256('\\x7431'::bytea), 'hex')",
    "encode('\\x7431'::bytea, 'hex')",
    "pg_catalog.encode(decode('00', 'hex'), 'hex')",
    "pg_catalog.encode(convert_to('t1', 'UTF8'), 'hex')",
    "pg_catalog.encode(substr('\\x0102'::bytea, 1, 1), 'hex')",
    "to_char('2026-01-01 00:10:00'::timestamp, 'YYYY')",
    "to_char('2026-01-01 00:10:00+00'::timestamptz, 'YYYY')",
    "array_to_string(ARRAY['a', 'b'], ',')",
    "pg_catalog.array_to_string(string_to_array('a,b', ','), '|')",
    "regexp_replace('a:b', ':[^:]*$', '')",
    "floor(1.5::numeric)::text",
    "array_ndims(ARRAY['a'])::text",
    "isfinite('2026-01-01 00:10:00+00'::timestamptz)::text",
    "(SELECT pg_catalog.array_agg(x)::text FROM unnest(ARRAY['a', 'b']) AS x)",
    "(SELECT string_agg(x, ',') FROM pg_catalog.unnest(ARRAY['a', 'b']) AS x)",
    "'a'::text || 'b'::text",
    "pg_catalog.encode('\\x01'::bytea || '\\x02'::bytea, 'hex')",
    "('a'::text = 'a'::text)::text",
    "('a'::text <> 'a'::text)::text",
    "(2::bigint < 0)::text",
]


@pytest.fixture
def hostile(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """``db`` with schema evil installed (search_path still the default)."""
    db.execute(HOSTILE_OBJECTS)
    return db


def _set_path(conn: psycopg.Connection[Any], path: str | None) -> None:
    if path is None:
        conn.execute("RESET search_path")
    else:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))


@pytest.mark.parametrize("expression", UNPINNED_EXPRESSIONS)
def test_hostile_schema_changes_unpinned_expressions(
    hostile: psycopg.Connection[Any], expression: str
) -> None:
    query = sql.SQL("SELECT ({})::pg_catalog.text").format(sql.SQL(expression))
    _set_path(hostile, None)
    normal = hostile.execute(query).fetchone()
    _set_path(hostile, HOSTILE_PATH)
    try:
        shadowed = hostile.execute(query).fetchone()
    finally:
        _set_path(hostile, None)
    assert normal != shadowed, f"evil does not shadow {expression}: both {normal}"


def test_hostile_schema_does_not_change_the_key_builders(
    hostile: psycopg.Connection[Any],
) -> None:
    _set_path(hostile, HOSTILE_PATH)
    try:
        path = hostile.execute("SHOW search_path").fetchone()
        assert path == (HOSTILE_PATH,)
        results = {vector["name"]: sql_call(hostile, vector) for vector in VECTORS}
    finally:
        _set_path(hostile, None)
    failures = []
    for vector in VECTORS:
        try:
            check(vector, results[vector["name"]])
        except AssertionError as exc:
            failures.append(f"{vector['name']}: {exc}")
    assert not failures, "\n".join(failures)


def test_hostile_schema_does_not_change_a_builder_inside_a_query(
    hostile: psycopg.Connection[Any],
) -> None:
    """The builders also hold when inlined into a caller's larger query."""
    _set_path(hostile, HOSTILE_PATH)
    try:
        row = hostile.execute(
            "SELECT office.blockers_resolved_key(t.id, t.blockers),"
            "       office.second_precision_text(t.ts)"
            "  FROM (VALUES ('task-x'::pg_catalog.text,"
            "                ARRAY['blocker-b', 'blocker-a']::pg_catalog.text[],"
            "                '2026-01-01 00:10:00.123456+00'::pg_catalog.timestamptz))"
            "       AS t(id, blockers, ts)"
        ).fetchone()
    finally:
        _set_path(hostile, None)
    assert row == (
        "blockers_resolved:task-x:d7df692e08daa09b54d82524e90dc63f128d9c18377d74f333532afa1ba1a166",
        "2026-01-01 00:10:00",
    )


# ---------------------------------------------------------------------------
# (b)-(c) catalog lint


@pytest.fixture
def outsider(db: psycopg.Connection[Any]) -> Iterator[str]:
    """A fresh NOLOGIN role that belongs to no office role: what PUBLIC gets."""
    name = f"office_outsider_{uuid.uuid4().hex[:12]}"
    db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    try:
        members = db.execute(
            "SELECT r FROM pg_catalog.unnest(%s::pg_catalog.text[]) AS r"
            " WHERE pg_catalog.pg_has_role(%s, r, 'MEMBER')",
            [list(OFFICE_ROLES), name],
        ).fetchall()
        assert members == []
        yield name
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


FUNCTION_LINT = """
SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text AS function, problem
  FROM pg_catalog.pg_proc p
 CROSS JOIN LATERAL (
        -- (not the native definitions of sql/native/: C resolves no names;
        -- nor the inlined predicates, whose RETURN bodies were bound at
        -- creation and would not be inlined with a SET clause)
        SELECT 'search_path not pinned to pg_catalog, pg_temp'
         WHERE p.prokind <> 'a'
           AND p.prolang <> (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c')
           AND NOT (p.oid::pg_catalog.regprocedure::pg_catalog.text = ANY (%(inlined)s)
                    AND p.prosqlbody IS NOT NULL AND p.proconfig IS NULL)
           AND NOT coalesce(p.proconfig @> ARRAY[%(pinned)s]::pg_catalog.text[], false)
        UNION ALL
        SELECT 'PUBLIC may EXECUTE (acl)'
         WHERE EXISTS (SELECT FROM pg_catalog.aclexplode(coalesce(
                               p.proacl, pg_catalog.acldefault('f'::"char", p.proowner))) AS a
                        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
        UNION ALL
        SELECT 'an outsider role may EXECUTE'
         WHERE pg_catalog.has_function_privilege(%(outsider)s, p.oid, 'EXECUTE')
       ) AS problems(problem)
 WHERE p.pronamespace = 'office'::pg_catalog.regnamespace
 ORDER BY 1, 2
"""

RELATION_LINT = """
SELECT c.oid::pg_catalog.regclass::pg_catalog.text AS relation, problem
  FROM pg_catalog.pg_class c
 CROSS JOIN LATERAL (
        SELECT 'PUBLIC holds ' || a.privilege_type
          FROM pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault(
                   (CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) AS a
         WHERE a.grantee = 0
        UNION ALL
        SELECT 'an outsider role holds a table privilege'
         WHERE c.relkind <> 'S' AND pg_catalog.has_table_privilege(%(outsider)s, c.oid,
                   'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
        UNION ALL
        SELECT 'an outsider role holds a column privilege'
         WHERE c.relkind <> 'S' AND pg_catalog.has_any_column_privilege(%(outsider)s, c.oid,
                   'SELECT, INSERT, UPDATE, REFERENCES')
        UNION ALL
        SELECT 'an outsider role holds a sequence privilege'
         WHERE c.relkind = 'S' AND pg_catalog.has_sequence_privilege(%(outsider)s, c.oid,
                   'USAGE, SELECT, UPDATE')
       ) AS problems(problem)
 WHERE c.relnamespace = 'office'::pg_catalog.regnamespace
   AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
 ORDER BY 1, 2
"""


#: Predicates a planner inlines into the WHERE clause of a lookup: a SQL
#: function with a RETURN body and no SET clause. Their names were bound when
#: they were created (the hostile install checks what), so no search_path
#: rebinds them; a SET clause would make every row a function call.
INLINED = ["office._never_coalesces(text,boolean)"]


def function_problems(db: psycopg.Connection[Any], outsider: str) -> list[tuple[str, str]]:
    params = {"pinned": PINNED, "outsider": outsider, "inlined": INLINED}
    return [(row[0], row[1]) for row in db.execute(FUNCTION_LINT, params).fetchall()]


def relation_problems(db: psycopg.Connection[Any], outsider: str) -> list[tuple[str, str]]:
    return [
        (row[0], row[1]) for row in db.execute(RELATION_LINT, {"outsider": outsider}).fetchall()
    ]


def test_every_office_function_is_pinned_and_closed_to_public(
    db: psycopg.Connection[Any], outsider: str
) -> None:
    count = db.execute(
        "SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc"
        " WHERE pronamespace = 'office'::pg_catalog.regnamespace"
    ).fetchone()
    assert count is not None and count[0] >= 8  # schema_version + the seven builders
    assert function_problems(db, outsider) == []


def test_function_lint_catches_an_unpinned_public_function(
    db: psycopg.Connection[Any], outsider: str
) -> None:
    db.execute("CREATE FUNCTION office.lint_bait() RETURNS int LANGUAGE sql RETURN 1")
    assert function_problems(db, outsider) == [
        ("office.lint_bait()", "PUBLIC may EXECUTE (acl)"),
        ("office.lint_bait()", "an outsider role may EXECUTE"),
        ("office.lint_bait()", "search_path not pinned to pg_catalog, pg_temp"),
    ]


def test_schema_office_is_closed_to_public(db: psycopg.Connection[Any], outsider: str) -> None:
    row = db.execute(
        """
        SELECT pg_catalog.has_schema_privilege('public', 'office', 'USAGE'),
               pg_catalog.has_schema_privilege('public', 'office', 'CREATE'),
               pg_catalog.has_schema_privilege(%(o)s, 'office', 'USAGE'),
               pg_catalog.has_schema_privilege(%(o)s, 'office', 'CREATE'),
               EXISTS (SELECT FROM pg_catalog.pg_namespace n,
                              pg_catalog.aclexplode(coalesce(
                                  n.nspacl, pg_catalog.acldefault('n'::"char", n.nspowner))) AS a
                        WHERE n.nspname = 'office' AND a.grantee = 0)
        """,
        {"o": outsider},
    ).fetchone()
    assert row == (False, False, False, False, False)


def test_every_office_relation_is_closed_to_public(
    db: psycopg.Connection[Any], outsider: str
) -> None:
    assert relation_problems(db, outsider) == []


def test_relation_lint_catches_a_public_table(db: psycopg.Connection[Any], outsider: str) -> None:
    db.execute("CREATE TABLE office.lint_bait (id int)")
    db.execute("GRANT SELECT ON office.lint_bait TO PUBLIC")
    db.execute("CREATE SEQUENCE office.lint_bait_seq")
    db.execute("GRANT USAGE ON SEQUENCE office.lint_bait_seq TO PUBLIC")
    assert relation_problems(db, outsider) == [
        ("office.lint_bait", "PUBLIC holds SELECT"),
        ("office.lint_bait", "an outsider role holds a column privilege"),
        ("office.lint_bait", "an outsider role holds a table privilege"),
        ("office.lint_bait_seq", "PUBLIC holds USAGE"),
        ("office.lint_bait_seq", "an outsider role holds a sequence privilege"),
    ]


# ---------------------------------------------------------------------------
# (d) roles


def test_office_roles_exist_and_admin_holds_the_others(db: psycopg.Connection[Any]) -> None:
    rows = db.execute(
        "SELECT rolname, rolsuper, rolcanlogin FROM pg_catalog.pg_roles"
        " WHERE rolname = ANY(%s) ORDER BY rolname",
        [list(OFFICE_ROLES)],
    ).fetchall()
    assert [r[0] for r in rows] == sorted(OFFICE_ROLES)
    assert all(r[1] is False for r in rows), "no office role is a superuser"
    assert all(r[2] is False for r in rows), "office roles are NOLOGIN group roles"
    held = db.execute(
        "SELECT r, pg_catalog.pg_has_role('office_admin', r, 'MEMBER')"
        "  FROM pg_catalog.unnest(%s::pg_catalog.text[]) AS r ORDER BY r",
        [["office_producer", "office_worker", "office_reader"]],
    ).fetchall()
    assert held == [("office_producer", True), ("office_reader", True), ("office_worker", True)]
