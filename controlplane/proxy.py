"""The ``office_proxy`` extension script, generated from a shard's catalog.

The proxy serves the shard API unchanged (API.md §8), so its public functions
are not written by hand: this module reads every public ``office`` function
of a database where ``office`` is installed (name, arguments with defaults,
result type, comment, EXECUTE grants) and writes, for each, a wrapper on the
proxy routed as :data:`ROUTES` says, after the hand-written routing core
``sql/proxy/proxy_base.sql``. A function missing from :data:`ROUTES` fails the
generation, so a new shard function cannot be forgotten on the proxy.

    python -m controlplane.proxy DSN > sql/proxy/office_proxy--0.4.0.sql

Routing kinds:

* ``("workspace", arg)`` / ``("entity", kind, arg)``: one call on the
  partition of the workspace, or of the entity (``office._route``);
* ``"local"``: a pure key builder, copied and run on the proxy itself;
* ``"sum"``: every shard, counts added;
* ``"max"``: every shard, the greatest value (NULL when every shard says NULL);
* ``("ordered", arg, order)``: every shard, merged rows ordered and limited;
* ``("budget", arg)``: the shards in turn, each given what is left of the
  limit, so the work done in all is at most the limit;
* ``"claim"``: ``claim_run``; routed by agent, or the shards in turn until one
  returns a run;
* ``"version"``: the version every shard runs;
* ``"unsupported"``: not served yet (0A000), see docs/scale-out.md.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import psycopg

from controlplane import schema

Route = str | tuple[str, ...]

ROUTES: dict[str, Route] = {
    "upsert_agent": ("workspace", "workspace_id"),
    "create_task": ("workspace", "workspace_id"),
    "create_routine": ("workspace", "workspace_id"),
    "enqueue_run": ("entity", "agent", "agent_profile_id"),
    "request_wakeup": ("entity", "agent", "agent_profile_id"),
    "set_agent_status": ("entity", "agent", "id"),
    "add_blocker": ("entity", "task", "task_id"),
    "remove_blocker": ("entity", "task", "task_id"),
    "archive_task": ("entity", "task", "task_id"),
    "assign_task": ("entity", "task", "task_id"),
    "get_task": ("entity", "task", "task_id"),
    "is_task_terminal": ("entity", "task", "task_id"),
    "move_task": ("entity", "task", "task_id"),
    "task_terminal_status": ("entity", "task", "task_id"),
    "sync_routine_run_status": ("entity", "task", "task_id"),
    "reconcile_parent": ("entity", "task", "parent_task_id"),
    "child_generation": ("entity", "task", "parent_task_id"),
    "child_set_key": ("entity", "task", "parent_task_id"),
    "add_routine_trigger": ("entity", "routine", "routine_id"),
    "dispatch_routine": ("entity", "routine", "routine_id"),
    "claim_routine_tick": ("entity", "trigger", "trigger_id"),
    "fire_routine_tick": ("entity", "trigger", "trigger_id"),
    "close_routine_run": ("entity", "routine_run", "routine_run_id"),
    "cancel_run": ("entity", "run", "run_id"),
    "fail_run": ("entity", "run", "run_id"),
    "finish_run": ("entity", "run", "run_id"),
    "get_run": ("entity", "run", "run_id"),
    "heartbeat_run": ("entity", "run", "run_id"),
    "retry_run": ("entity", "run", "run_id"),
    "run_keys": ("entity", "run", "run_id"),
    "dispatch_wakeup": ("entity", "wakeup", "wakeup_request_id"),
    "fail_wakeup": ("entity", "wakeup", "wakeup_request_id"),
    "assignment_key": "local",
    "blocker_digest": "local",
    "blockers_resolved_key": "local",
    "comment_key": "local",
    "routine_fingerprint": "local",
    "routine_key": "local",
    "second_precision_text": "local",
    "wake_operation_id": "local",
    "recover_stale_runs": "sum",
    "prune_events": "sum",
    "prune_runs": "sum",
    "mark_all_parents": "sum",
    "list_stuck_parents": ("ordered", "max_rows", 'parent_task_id COLLATE "C"'),
    "due_routine_triggers": (
        "ordered",
        "max_rows",
        'next_run_at NULLS FIRST, trigger_id COLLATE "C"',
    ),
    "sweep_stuck_parents": ("budget", "max_rows"),
    "dispatch_queued_wakeups": ("budget", "max_rows"),
    "take_poison_reports": ("budget", "max_rows"),
    "claim_run": "claim",
    # The dashboard's reads (sql/85_dashboard.sql): lists merged newest first
    # (or by id) and cut to the page; the run window ends where the newest of
    # the shards' windows ends, so no shard's runs are skipped or repeated.
    "list_runs": ("ordered", "page_size", "id DESC"),
    "run_window_end": "max",
    "list_agents": ("ordered", "page_size", "id"),
    "list_tasks": ("ordered", "page_size", "id DESC"),
    "list_routines": ("ordered", "page_size", "id DESC"),
    "list_wakeups": ("ordered", "page_size", "id DESC"),
    "list_task_children": ("entity", "task", "parent_task_id"),
    "list_task_blockers": ("entity", "task", "task_id"),
    "get_parent_receipt": ("entity", "task", "parent_task_id"),
    "get_routine": ("entity", "routine", "routine_id"),
    "list_routine_triggers": ("entity", "routine", "routine_id"),
    "list_routine_runs": ("entity", "routine", "routine_id"),
    "schema_version": "version",
    # Event ids are a per-shard sequence (they collide across shards), the
    # poison calls name a row whose kind depends on the loop, and enqueue_runs
    # must be split by shard: not served through the proxy yet.
    "claim_events": "unsupported",
    "list_events": "unsupported",
    # Rows per status to add up across shards (and estimates to combine).
    "run_status_counts": "unsupported",
    "ack_events": "unsupported",
    "set_aside": "unsupported",
    "release_poison": "unsupported",
    "enqueue_runs": "unsupported",
    "daemon_stats": "unsupported",
}


# What one database refuses across workspaces and a shard cannot see when the
# other entity lives on another shard: (kind, argument, SQLSTATE) checked on
# the proxy before the call (office._checked_partition).
CHECKS: dict[str, list[tuple[str, str, str]]] = {
    "upsert_agent": [("agent", "id", "OFW01")],
    "create_task": [
        ("task", "id", "23505"),
        ("task", "parent_id", "OFW01"),
        ("agent", "assignee_agent_profile_id", "OFW01"),
    ],
    "create_routine": [
        ("routine", "id", "23505"),
        ("agent", "assignee_agent_profile_id", "OFW01"),
    ],
    "assign_task": [("agent", "assignee_agent_profile_id", "OFW01")],
    "add_blocker": [("task", "blocker_task_id", "OFW01")],
}


@dataclass(frozen=True)
class Function:
    name: str
    identity: str  # argument types, for COMMENT/GRANT
    arguments: str  # with names and defaults
    arg_names: list[str]
    result: str
    returns_set: bool
    composite_result: bool
    comment: str | None
    grantees: list[str]
    definition: str


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
       pg_catalog.pg_get_functiondef(p.oid)
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
            )
        )
    return functions


def _helper(fn: Function, prefix: str, run_on: str, result: str) -> tuple[str, str]:
    """A PL/Proxy function ``office._<prefix>_<name>(_part, _a1, ...)`` calling
    the shard function by its positional arguments; its name and SQL."""
    name = f"office._{prefix}_{fn.name}"
    types = [t.strip() for t in fn.identity.split(",")] if fn.identity else []
    # pg_get_function_identity_arguments spells "name type": keep the type.
    types = [t.split(" ", 1)[1] if " " in t else t for t in types]
    params = ["_part integer"] + [f"_a{i + 1} {t}" for i, t in enumerate(types)]
    positions = ", ".join(f"${i + 2}" for i in range(len(types)))
    if fn.composite_result:
        select = f"SELECT * FROM office.{fn.name}({positions})"
    else:
        select = f"SELECT office.{fn.name}({positions}) AS {fn.name}"
    sql = (
        f"CREATE FUNCTION {name}({', '.join(params)}) RETURNS {result}\n"
        f"    LANGUAGE plproxy\n"
        f"    SET search_path = pg_catalog, pg_temp\n"
        f"AS $$\n    CLUSTER 'office_cluster';\n    RUN ON {run_on};\n    {select};\n$$;\n"
        f"COMMENT ON FUNCTION {name}({', '.join(['integer', *types])}) IS\n"
        f"    'Internal: office.{fn.name} on the shard of partition _part ({prefix}).';\n"
        f"REVOKE EXECUTE ON FUNCTION {name}({', '.join(['integer', *types])}) FROM PUBLIC;\n"
    )
    # The public wrapper runs as its caller (not SECURITY DEFINER, so the
    # user mapping of the caller applies): whoever may call it calls its helper.
    if fn.grantees:
        signature = f"{name}({', '.join(['integer', *types])})"
        sql += f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(fn.grantees)};\n"
    return name, sql


def _setof(result: str) -> str:
    return result if result.startswith(("SETOF ", "TABLE(")) else f"SETOF {result}"


def _args(fn: Function, part: str, replace: dict[int, str] | None = None) -> str:
    values = [part] + [(replace or {}).get(i, f"${i + 1}") for i in range(len(fn.arg_names))]
    return ", ".join(values)


def _position(fn: Function, arg: str) -> int:
    return fn.arg_names.index(arg) + 1


def _wrapper(fn: Function, language: str, body: str) -> str:
    return (
        f"CREATE FUNCTION office.{fn.name}({fn.arguments}) RETURNS {fn.result}\n"
        f"    LANGUAGE {language} VOLATILE\n"
        f"    SET search_path = pg_catalog, pg_temp\n"
        f"AS $fn$\n{body}\n$fn$;\n"
    )


def _unreachable_or_raise() -> str:
    # A shard that cannot be reached is left out of a merge (the others keep
    # working); any other error of a shard reaches the caller unchanged.
    return (
        "        EXCEPTION WHEN OTHERS THEN\n"
        "            IF SQLSTATE NOT LIKE '08%' THEN RAISE; END IF;\n"
        "            RAISE WARNING 'office_proxy: shard % skipped: %',\n"
        "                office._shard_name(s.shard), SQLERRM;\n"
    )


def function_sql(fn: Function) -> str:
    """The proxy's definition of one shard function (helpers included)."""
    route = ROUTES.get(fn.name)
    if route is None:
        raise LookupError(
            f"office.{fn.name} has no route on the proxy (controlplane/proxy.py ROUTES)"
        )
    star = "SELECT * FROM" if fn.composite_result else "SELECT"
    if route == "local":
        return fn.definition.rstrip() + ";\n"
    if isinstance(route, tuple) and route[0] in ("workspace", "entity"):
        arg = route[-1]
        at = f"${_position(fn, arg)}"
        checks = CHECKS.get(fn.name)
        located = f"office._workspace_of('{route[1]}', {at})"
        workspace = at if route[0] == "workspace" else located
        if checks:
            items = ", ".join(
                f"'{kind}', ${_position(fn, arg)}, '{code}'" for kind, arg, code in checks
            )
            part = f"office._checked_partition({workspace}, ARRAY[{items}])"
        elif route[0] == "workspace":
            part = f"office._partition({at})"
        else:
            part = f"office._route('{route[1]}', {at})"
        helper, sql = _helper(fn, "on", "_part", fn.result)
        return sql + _wrapper(fn, "sql", f"    {star} {helper}({_args(fn, part)})")
    if route == "sum":
        helper, sql = _helper(fn, "all", "ALL", _setof(fn.result))
        body = (
            f"    SELECT coalesce(pg_catalog.sum(n), 0)::{fn.result}"
            f" FROM {helper}({_args(fn, '0')}) AS n"
        )
        return sql + _wrapper(fn, "sql", body)
    if route == "max":
        helper, sql = _helper(fn, "all", "ALL", _setof(fn.result))
        body = f"    SELECT pg_catalog.max(x) FROM {helper}({_args(fn, '0')}) AS x"
        return sql + _wrapper(fn, "sql", body)
    if route == "version":
        helper, sql = _helper(fn, "all", "ALL", _setof(fn.result))
        body = (
            "DECLARE\n    v text[];\nBEGIN\n"
            f"    SELECT pg_catalog.array_agg(DISTINCT x) INTO v FROM {helper}(0) AS x;\n"
            "    IF pg_catalog.cardinality(v) <> 1 THEN\n"
            "        RAISE EXCEPTION USING ERRCODE = '55000',\n"
            "            MESSAGE = pg_catalog.format(\n"
            "                'office_proxy: the shards run different office versions: %s', v);\n"
            "    END IF;\n    RETURN v[1];\nEND"
        )
        return sql + _wrapper(fn, "plpgsql", body)
    if isinstance(route, tuple) and route[0] == "ordered":
        helper, sql = _helper(fn, "all", "ALL", fn.result)
        limit = f"${_position(fn, route[1])}"
        # A negative or NULL limit goes to the shards unlimited, so their 22023
        # reaches the caller rather than the proxy's own LIMIT error.
        body = (
            f"    SELECT * FROM {helper}({_args(fn, '0')}) ORDER BY {route[2]}"
            f" LIMIT CASE WHEN {limit} >= 0 THEN {limit} END"
        )
        return sql + _wrapper(fn, "sql", body)
    if isinstance(route, tuple) and route[0] == "budget":
        helper, sql = _helper(fn, "on", "_part", fn.result)
        k = _position(fn, route[1])
        body = (
            "DECLARE\n    s record;\n    v_left integer := ${k};\n    v_n integer;\nBEGIN\n"
            "    IF v_left IS NULL OR v_left < 0 THEN  -- the shard's own 22023\n"
            "        RETURN QUERY SELECT * FROM {helper}({first});\n        RETURN;\n    END IF;\n"
            "    FOR s IN SELECT * FROM office._shards() LOOP\n"
            "        EXIT WHEN v_left = 0;\n        BEGIN\n"
            "            RETURN QUERY SELECT * FROM {helper}({each});\n"
            "            GET DIAGNOSTICS v_n = ROW_COUNT;\n            v_left := v_left - v_n;\n"
            "{skip}        END;\n    END LOOP;\nEND"
        ).format(
            k=k,
            helper=helper,
            first=_args(fn, "0"),
            each=_args(fn, "s.part", {k - 1: "v_left"}),
            skip=_unreachable_or_raise(),
        )
        return sql + _wrapper(fn, "plpgsql", body)
    if route == "claim":
        helper, sql = _helper(fn, "on", "_part", fn.result)
        body = (
            "DECLARE\n    s record;\nBEGIN\n"
            "    IF $2 IS NOT NULL THEN\n"
            f"        RETURN QUERY SELECT * FROM {helper}(office._route('agent', $2), $1, $2);\n"
            "        RETURN;\n    END IF;\n"
            "    FOR s IN SELECT * FROM office._shards() LOOP\n        BEGIN\n"
            f"            RETURN QUERY SELECT * FROM {helper}(s.part, $1, $2);\n"
            "            IF FOUND THEN RETURN; END IF;\n"
            f"{_unreachable_or_raise()}        END;\n    END LOOP;\nEND"
        )
        return sql + _wrapper(fn, "plpgsql", body)
    if route == "unsupported":
        body = (
            "BEGIN\n    RAISE EXCEPTION USING ERRCODE = '0A000',\n"
            f"        MESSAGE = 'office_proxy: office.{fn.name} is not served through the proxy"
            " yet; call it on the shards (docs/scale-out.md)';\nEND"
        )
        return _wrapper(fn, "plpgsql", body)
    raise LookupError(f"unknown route {route!r} for office.{fn.name}")


def _grants(fn: Function) -> str:
    signature = f"office.{fn.name}({fn.identity})"
    lines = []
    if fn.comment is not None:
        quoted = fn.comment.replace("'", "''")
        lines.append(f"COMMENT ON FUNCTION {signature} IS\n    '{quoted}';")
    lines.append(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC;")
    if fn.grantees:
        lines.append(f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(fn.grantees)};")
    return "\n".join(lines) + "\n"


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
    """The stats views over every shard: text columns group, counts are
    added, timestamps take the minimum (the oldest)."""
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
        picks = []
        groups = []
        for column, type_ in zip(columns, types, strict=True):
            if type_ == "text":
                picks.append(column)
                groups.append(column)
            elif type_.startswith("timestamp"):
                picks.append(f"pg_catalog.min({column}) AS {column}")
            else:
                picks.append(f"pg_catalog.sum({column})::{type_} AS {column}")
        out.append(
            f"CREATE VIEW office.{name} AS\n    SELECT {', '.join(picks)}\n"
            f"      FROM office._all_{name}(0)\n     GROUP BY {', '.join(groups)};\n"
        )
        if comment is not None:
            quoted = comment.replace("'", "''")
            out.append(f"COMMENT ON VIEW office.{name} IS\n    '{quoted}';\n")
        out.append(f"REVOKE ALL ON office.{name} FROM PUBLIC;\n")
        if grantees:
            out.append(f"GRANT SELECT ON office.{name} TO {', '.join(grantees)};\n")
    return "".join(out)


_BODY_HEADER = re.compile(r"^CREATE OR REPLACE FUNCTION", re.MULTILINE)


def generate(conn: psycopg.Connection[Any]) -> str:
    """The whole ``office_proxy`` install script for the shard API of ``conn``."""
    base = (schema.sql_dir() / "proxy" / "proxy_base.sql").read_text(encoding="utf-8")
    parts = [
        base,
        "\n-- Generated by controlplane/proxy.py from a shard's catalog: do not edit.\n\n",
    ]
    parts.append(result_types_sql(conn))
    for fn in shard_functions(conn):
        parts.append("\n" + _BODY_HEADER.sub("CREATE FUNCTION", function_sql(fn)) + _grants(fn))
    parts.append("\n" + views_sql(conn))
    return "".join(parts)


def main() -> None:
    with psycopg.connect(sys.argv[1]) as conn:
        sys.stdout.write(generate(conn))


if __name__ == "__main__":
    main()
