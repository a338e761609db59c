"""A comparable snapshot of everything in schema ``office``: what both install
paths, and a fresh install versus an upgraded one, must agree on."""

from __future__ import annotations

from typing import Any

import psycopg


def _acl(acl: str, owner: str) -> str:
    """SQL rendering an ACL as sorted ``grantee:privilege`` items, with the
    owner (whoever installed) spelled OWNER and the grantor left out."""
    item = (
        f"CASE WHEN a.grantee = 0 THEN 'PUBLIC' WHEN a.grantee = {owner} THEN 'OWNER' "
        "ELSE pg_get_userbyid(a.grantee) END || ':' || a.privilege_type "
        "|| CASE WHEN a.is_grantable THEN '*' ELSE '' END"
    )
    return (
        f"(SELECT coalesce(string_agg({item}, ',' ORDER BY {item}), '') "
        # aclexplode is strict: a NULL ACL (a composite type's pg_class row)
        # gives no rows; '{}'::aclitem[] would raise "must be one-dimensional".
        f"FROM aclexplode({acl}) a)"
    )


# Each query returns rows that describe one kind of object, already ordered.
# Owners are left out (the two paths may run as different roles).
_QUERIES: dict[str, str] = {
    "schema": """
        SELECT n.nspname, pg_catalog.obj_description(n.oid, 'pg_namespace'),
               """
    + _acl("n.nspacl", "n.nspowner")
    + """
        FROM pg_namespace n WHERE n.nspname = 'office'
    """,
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence,
               """
    + _acl("c.relacl", "c.relowner")
    + """,
               pg_catalog.obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'office' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'c', 'f')
        ORDER BY c.relname COLLATE "C"
    """,
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
               coalesce(a.attcollation::regcollation::text, '')
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'office' AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
        ORDER BY c.relname COLLATE "C", a.attname COLLATE "C"
    """,
    "indexes": """
        SELECT c.relname, pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'office'
        ORDER BY c.relname COLLATE "C"
    """,
    "constraints": """
        SELECT t.relname, co.conname, co.contype, pg_get_constraintdef(co.oid)
        FROM pg_constraint co JOIN pg_class t ON t.oid = co.conrelid
        JOIN pg_namespace n ON n.oid = co.connamespace
        WHERE n.nspname = 'office'
        ORDER BY t.relname COLLATE "C", co.conname COLLATE "C"
    """,
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
               p.prokind, p.provolatile, p.proparallel, p.prosecdef, p.proisstrict,
               p.proconfig::text, l.lanname,
               md5(p.prosrc || coalesce(pg_get_function_sqlbody(p.oid), '')),
               """
    + _acl("p.proacl", "p.proowner")
    + """,
               pg_catalog.obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = 'office'
        ORDER BY p.proname COLLATE "C", pg_get_function_identity_arguments(p.oid) COLLATE "C"
    """,
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'office' AND NOT t.tgisinternal
        ORDER BY c.relname COLLATE "C", t.tgname COLLATE "C"
    """,
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'office' AND c.relkind IN ('v', 'm')
        ORDER BY c.relname COLLATE "C"
    """,
    "types": """
        SELECT t.typname, t.typtype, pg_catalog.obj_description(t.oid, 'pg_type')
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'office' AND t.typtype IN ('c', 'd', 'e')
          AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
        ORDER BY t.typname COLLATE "C"
    """,
    "sequences": """
        SELECT c.relname, s.seqtypid::regtype::text, s.seqstart, s.seqincrement, s.seqcycle
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'office'
        ORDER BY c.relname COLLATE "C"
    """,
}


def snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {kind: conn.execute(query).fetchall() for kind, query in _QUERIES.items()}


def differences(
    left: dict[str, list[tuple[Any, ...]]], right: dict[str, list[tuple[Any, ...]]]
) -> list[str]:
    """Human-readable lines for every row present on one side only."""
    lines = []
    for kind in _QUERIES:
        only_left = [row for row in left[kind] if row not in right[kind]]
        only_right = [row for row in right[kind] if row not in left[kind]]
        lines += [f"{kind}: only in first:  {row}" for row in only_left]
        lines += [f"{kind}: only in second: {row}" for row in only_right]
    return lines
