"""The ``office_proxy`` extension script, generated from a shard's catalog.

The proxy serves the shard API unchanged (docs/api.md §8), so its public functions
are not written by hand: this module reads every public ``office`` function
of a database where ``office`` is installed (name, arguments with defaults,
result type, comment, EXECUTE grants) and writes, for each, a wrapper on the
proxy routed as ``ROUTES`` (:mod:`controlplane.scaleout.proxy_routes`) says, after
the hand-written routing core ``sql/proxy/proxy_base.sql``. A function
missing from ``ROUTES`` fails the generation, so a new shard function cannot
be forgotten on the proxy.

    python -m controlplane.scaleout.proxy DSN > sql/proxy/office_proxy--0.5.0.sql

The SQL of each wrapper is :mod:`controlplane.scaleout.proxy_wrappers`'s; the
routing kinds are listed in :mod:`controlplane.scaleout.proxy_routes`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import psycopg

from controlplane import schema
from controlplane.scaleout.proxy_routes import ROUTES
from controlplane.scaleout.proxy_wrappers import (
    EVENT_LEAD,
    Function,
    function_sql,
    grants_sql,
    merged_select,
    poison_row,
)

__all__ = ["ROUTES", "generate", "shard_functions"]

_CATALOG = """
SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid),
       pg_catalog.pg_get_function_arguments(p.oid), coalesce(p.proargnames, '{}'),
       coalesce(p.proargmodes, '{}'),
       pg_catalog.pg_get_function_result(p.oid), p.proretset,
       t.typtype = 'c' OR p.proargmodes IS NOT NULL,
       pg_catalog.obj_description(p.oid, 'pg_proc'),
       ARRAY(SELECT a.grantee::regrole::text FROM pg_catalog.aclexplode(p.proacl) a
              WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
              ORDER BY 1),
       pg_catalog.pg_get_functiondef(p.oid),
       CASE WHEN p.proargmodes IS NOT NULL THEN
            ARRAY(SELECT ARRAY[u.n, pg_catalog.format_type(u.t, NULL)]
                    FROM unnest(p.proargnames, p.proallargtypes, p.proargmodes)
                           WITH ORDINALITY AS u(n, t, m, i)
                   WHERE u.m IN ('o', 't', 'b') ORDER BY u.i)
            ELSE ARRAY(SELECT ARRAY[a.attname::text,
                                    pg_catalog.format_type(a.atttypid, a.atttypmod)]
                         FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
                        ORDER BY a.attnum) END
  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_type t ON t.oid = p.prorettype
 WHERE p.pronamespace = 'office'::regnamespace AND p.proname !~ '^_'
 ORDER BY p.proname, 2
"""


def shard_functions(conn: psycopg.Connection[Any]) -> list[Function]:
    """Every public function of ``office`` in the database of ``conn``."""
    functions = []
    for row in conn.execute(_CATALOG):
        names, modes = list(row[3]), list(row[4])
        inputs = [n for i, n in enumerate(names) if not modes or modes[i] in ("i", "b")]
        functions.append(
            Function(
                name=row[0],
                identity=row[1],
                arguments=row[2],
                arg_names=inputs,
                result=row[5],
                returns_set=row[6],
                composite_result=row[7],
                comment=row[8],
                grantees=list(row[9]),
                definition=row[10],
                columns=[(name, type_) for name, type_ in row[11]],
            )
        )
    return functions


_TYPES = """
SELECT t.typname,
       ARRAY(SELECT pg_catalog.quote_ident(a.attname) || ' '
                    || pg_catalog.format_type(a.atttypid, a.atttypmod)
                          FROM pg_catalog.pg_attribute a
                         WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
                         ORDER BY a.attnum)
  FROM pg_catalog.pg_type t
 WHERE t.typnamespace = 'office'::regnamespace AND t.typtype = 'c'
   AND t.oid IN (SELECT p.prorettype FROM pg_catalog.pg_proc p
                  WHERE p.pronamespace = 'office'::regnamespace AND p.proname !~ '^_')
 ORDER BY 1
"""


def result_types_sql(conn: psycopg.Connection[Any]) -> str:
    """The composite result types (tables on a shard, types on the proxy)."""
    out = []
    for name, columns in conn.execute(_TYPES):
        out.append(f"CREATE TYPE office.{name} AS (\n    " + ",\n    ".join(columns) + "\n);\n")
    return "".join(out)


_VIEWS = """
SELECT c.relname, pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT a.grantee::regrole::text FROM pg_catalog.aclexplode(c.relacl) a
              WHERE a.privilege_type = 'SELECT' AND a.grantee <> 0 AND a.grantee <> c.relowner
              ORDER BY 1),
       ARRAY(SELECT a.attname FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 ORDER BY a.attnum),
       ARRAY(SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 ORDER BY a.attnum)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'office'::regnamespace AND c.relkind = 'v' AND c.relname !~ '^_'
 ORDER BY 1
"""


def views_sql(conn: psycopg.Connection[Any]) -> str:
    """The stats views over every shard, merged as
    :func:`controlplane.scaleout.proxy_wrappers.merged_select` merges rows (text
    columns group, counts are added, timestamps take the oldest), the groups
    in the order the shards return them, so a view with an ORDER BY (queue_stats:
    by status) keeps it through the proxy."""
    out = []
    for name, comment, grantees, columns, types in conn.execute(_VIEWS):
        table = ", ".join(f"{c} {t}" for c, t in zip(columns, types, strict=True))
        out.append(
            f"CREATE FUNCTION office._all_{name}(_part integer) RETURNS TABLE({table})\n"
            "    LANGUAGE plproxy\n    SET search_path = pg_catalog, pg_temp\n"
            f"AS $$\n    CLUSTER 'office_cluster';\n    RUN ON ALL;\n"
            f"    SELECT * FROM office.{name};\n$$;\n"
            f"COMMENT ON FUNCTION office._all_{name}(integer) IS\n"
            f"    'Internal: office.{name} of every shard.';\n"
            f"REVOKE EXECUTE ON FUNCTION office._all_{name}(integer) FROM PUBLIC;\n"
        )
        if grantees:
            out.append(
                f"GRANT EXECUTE ON FUNCTION office._all_{name}(integer) TO {', '.join(grantees)};\n"
            )
        merged = merged_select(
            list(zip(columns, types, strict=True)), f"office._all_{name}(0)", ordered=True
        )
        out.append(f"CREATE VIEW office.{name} AS\n{merged};\n")
        if comment is not None:
            quoted = comment.replace("'", "''")
            out.append(f"COMMENT ON VIEW office.{name} IS\n    '{quoted}';\n")
        out.append(f"REVOKE ALL ON office.{name} FROM PUBLIC;\n")
        if grantees:
            out.append(f"GRANT SELECT ON office.{name} TO {', '.join(grantees)};\n")
    return "".join(out)


_TABLE_SHAPE = """
SELECT pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT a.grantee::regrole::text FROM pg_catalog.aclexplode(c.relacl) a
              WHERE a.privilege_type = 'SELECT' AND a.grantee <> 0 AND a.grantee <> c.relowner
              ORDER BY 1),
       ARRAY(SELECT ARRAY[a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)]
               FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
  FROM pg_catalog.pg_class c
 WHERE c.oid = %(table)s::pg_catalog.regclass
"""


def _shard_table_view(
    conn: psycopg.Connection[Any],
    name: str,
    alias: str,
    pick: Callable[[str], str],
    joins: str,
    about: str,
) -> str:
    """``office.<name>`` on the proxy: a view of every shard's rows, read by
    ``office._all_<name>`` on each shard with ``pick(column)`` as each
    column's expression (``alias`` the table's, ``joins`` what it needs),
    with the table's comment and SELECT grants; ``about`` ends the
    function's comment."""
    row = conn.execute(_TABLE_SHAPE, {"table": f"office.{name}"}).fetchone()
    assert row is not None
    comment, grantees, columns = row
    table = ", ".join(f"{c} {t}" for c, t in columns)
    picks = ", ".join(pick(c) for c, _ in columns)
    signature = f"office._all_{name}(integer, integer, integer)"
    out = [
        f"CREATE FUNCTION office._all_{name}({', '.join(EVENT_LEAD)}) RETURNS TABLE({table})\n"
        "    LANGUAGE plproxy\n    SET search_path = pg_catalog, pg_temp\n"
        "AS $$\n    CLUSTER 'office_cluster';\n    RUN ON _part;\n"
        f"    SELECT {picks}\n      FROM office.{name} {alias}\n      {joins};\n$$;\n"
        f"COMMENT ON FUNCTION {signature} IS\n"
        f"    'Internal: office.{name} of the shard of partition _part'\n"
        f"    ' ({about}).';\n"
        f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC;\n",
        f"CREATE VIEW office.{name} AS\n"
        f"    SELECT {alias}.* FROM office._shards() s\n"
        f"     CROSS JOIN LATERAL office._all_{name}(s.part, office._partitions(), s.part)"
        f" {alias};\n",
    ]
    if comment is not None:
        quoted = comment.replace("'", "''")
        out.append(f"COMMENT ON VIEW office.{name} IS\n    '{quoted}';\n")
    out.append(f"REVOKE ALL ON office.{name} FROM PUBLIC;\n")
    if grantees:
        out.append(f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(grantees)};\n")
        out.append(f"GRANT SELECT ON office.{name} TO {', '.join(grantees)};\n")
    return "".join(out)


def poison_sql(conn: psycopg.Connection[Any]) -> str:
    """``office.poison`` on the proxy: a view of every shard's set-aside rows
    (what the dashboard and doctor read), a subscriber row by its event's id
    through the proxy, as take_poison_reports returns it."""
    pick, joins = poison_row("p.loop")
    return _shard_table_view(
        conn,
        "poison",
        "p",
        lambda c: pick if c == "row_id" else f"p.{c}",
        joins,
        "subscriber rows by their event''s id through the proxy",
    )


def wake_decisions_sql(conn: psycopg.Connection[Any]) -> str:
    """``office.wake_decisions`` on the proxy: a view of every shard's rows,
    each id encoded as events' are (``local_id * partitions + partition``,
    the partition of the decision's agent's workspace, else the shard's
    lowest), so the ids are unique across shards and survive a partition
    move."""
    part = "coalesce(pg_catalog.hashtext(a.workspace_id) & ($2 - 1), $3)"
    return _shard_table_view(
        conn,
        "wake_decisions",
        "d",
        lambda c: f"d.id * $2 + {part} AS id" if c == "id" else f"d.{c}",
        "LEFT JOIN office.agent_profiles a ON a.id = d.agent_profile_id",
        "ids as the proxy returns them",
    )


_BODY_HEADER = re.compile(r"^CREATE OR REPLACE FUNCTION", re.MULTILINE)


def generate(conn: psycopg.Connection[Any]) -> str:
    """The whole ``office_proxy`` install script for the shard API of ``conn``."""
    base = (schema.sql_dir() / "proxy" / "proxy_base.sql").read_text(encoding="utf-8")
    parts = [
        base,
        "\n-- Generated by controlplane/scaleout/proxy.py from a shard's catalog: do not edit.\n\n",
    ]
    parts.append(result_types_sql(conn))
    for fn in shard_functions(conn):
        parts.append("\n" + _BODY_HEADER.sub("CREATE FUNCTION", function_sql(fn)) + grants_sql(fn))
    parts.append("\n" + views_sql(conn))
    parts.append("\n" + poison_sql(conn))
    parts.append("\n" + wake_decisions_sql(conn))
    return "".join(parts)


def main() -> None:
    with psycopg.connect(sys.argv[1]) as conn:
        sys.stdout.write(generate(conn))


if __name__ == "__main__":
    main()
