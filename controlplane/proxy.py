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
* ``("budget", arg)``: the shards in turn (from a random one), each given
  what is left of the limit, so the work done in all is at most the limit;
* ``"merge"``: every shard, the rows merged as one database's (text columns
  group, counts added, the oldest timestamp, the greatest lag, ``exact`` only
  when every shard is, jsonb counts added per key);
* ``"claim"``: ``claim_run``; routed by agent, or the shards in turn (from a
  random one) until one returns a run;
* ``("events_page", before, size)`` / ``("events_ack", ids)``: a page of events
  merged newest first / ids acknowledged on the shards they name. Event ids
  through the proxy are ``local_id * partitions + partition`` (a budget route
  returning events encodes them too);
* ``("poison", loop, row_id)``: a set-aside row, by its loop's kind of row;
* ``("split", elements, key, ordinal)``: a bulk call split by the shard of
  the ``key`` (the agent) of each of its ``elements``, the outcomes in
  element order by their ``ordinal`` column;
* ``"version"``: the version every shard runs.
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
    # Events: ids through the proxy are local_id * partitions + partition
    # (office._event_groups), so they are unique and name their shard.
    "claim_events": ("budget", "max_rows"),
    "list_events": ("events_page", "before_id", "page_size"),
    "ack_events": ("events_ack", "ids"),
    # A set-aside row: by the loop's kind of row (POISON_ROWS).
    "set_aside": ("poison", "loop", "row_id"),
    "release_poison": ("poison", "loop", "row_id"),
    "enqueue_runs": ("split", "requests", "agent_profile_id", "ordinality"),
    "daemon_stats": "merge",
    "run_status_counts": "merge",
}


# The entity kind of the rows each loop sets aside (sql/70_daemon.sql,
# office.poison): a row of another loop (prune, or one no shard knows) goes to
# partition 0; the subscriber's rows are events (office._event_groups).
POISON_ROWS: dict[str, str] = {
    "wakeups": "wakeup",
    "cron": "trigger",
    "sweep": "task",
    "recovery": "run",
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
    columns: list[tuple[str, str]]  # result columns (name, type); none for a scalar


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


def _types(fn: Function) -> list[str]:
    types = [t.strip() for t in fn.identity.split(",")] if fn.identity else []
    # pg_get_function_identity_arguments spells "name type": keep the type.
    return [t.split(" ", 1)[1] if " " in t else t for t in types]


def _params(fn: Function, first: int) -> str:
    """The shard function's arguments as the positions from ``first`` on."""
    return ", ".join(f"${first + i}" for i in range(len(_types(fn))))


# The leading arguments of a helper: the partition it runs on; an event
# helper also gets the partition count and the shard's lowest partition, for
# the event ids (office._event_groups).
_LEAD = ["_part integer"]
_EVENT_LEAD = ["_part integer", "_parts integer", "_home integer"]


def _helper(
    fn: Function,
    prefix: str,
    run_on: str,
    result: str,
    select: str | None = None,
    lead: list[str] = _LEAD,
) -> tuple[str, str]:
    """A PL/Proxy function ``office._<prefix>_<name>(_part, [...,] _a1, ...)``
    running ``select`` (by default the shard function by its positional
    arguments) on the shard of ``run_on``; its name and SQL."""
    name = f"office._{prefix}_{fn.name}"
    types = _types(fn)
    params = lead + [f"_a{i + 1} {t}" for i, t in enumerate(types)]
    positions = _params(fn, len(lead) + 1)
    if select is None and fn.composite_result:
        select = f"SELECT * FROM office.{fn.name}({positions})"
    elif select is None:
        select = f"SELECT office.{fn.name}({positions}) AS {fn.name}"
    signature = f"{name}({', '.join([p.split(' ', 1)[1] for p in lead] + types)})"
    sql = (
        f"CREATE FUNCTION {name}({', '.join(params)}) RETURNS {result}\n"
        f"    LANGUAGE plproxy\n"
        f"    SET search_path = pg_catalog, pg_temp\n"
        f"AS $$\n    CLUSTER 'office_cluster';\n    RUN ON {run_on};\n    {select};\n$$;\n"
        f"COMMENT ON FUNCTION {signature} IS\n"
        f"    'Internal: office.{fn.name} on the shard of partition _part ({prefix}).';\n"
        f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC;\n"
    )
    # The public wrapper runs as its caller (not SECURITY DEFINER, so the
    # user mapping of the caller applies): whoever may call it calls its helper.
    if fn.grantees:
        sql += f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(fn.grantees)};\n"
    return name, sql


# On a shard, in an event helper's SELECT (events e LEFT JOIN tasks t): the
# partition of the event (its task's workspace's; the shard's lowest when the
# task is unknown) and its id through the proxy (office._event_groups).
_EVENT_PART = "coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3)"
_EVENT_ID = f"e.id * $2 + {_EVENT_PART}"


# A row id of office.poison (alias p) that names an event (loop subscriber,
# a canonical integer), on a shard: then its id through the proxy, joined
# with its event e (if it still exists) and task t.
def _poison_row(loop: str) -> tuple[str, str]:
    subscriber = f"{loop} = 'subscriber' AND p.row_id ~ '^[1-9][0-9]{{0,17}}$'"
    pick = (
        f"CASE WHEN {subscriber} THEN (p.row_id::bigint * $2 + {_EVENT_PART})::text"
        " ELSE p.row_id END AS row_id"
    )
    joins = (
        f"LEFT JOIN office.events e ON e.id = CASE WHEN {subscriber} THEN p.row_id::bigint END"
        "\n      LEFT JOIN office.tasks t ON t.id = e.task_id"
    )
    return pick, joins


def _encoded_select(fn: Function, source: str) -> str | None:
    """On a shard, the rows of ``source`` with the ids they name through the
    proxy: events' ids, and the row ids of set-aside events (a function of a
    ``loop`` returning ``row_id``s); None for a function whose results name
    no event."""
    names = [c for c, _ in fn.columns]
    if fn.result == "SETOF office.events":
        alias, encoded, joins = "e", {"id": _EVENT_ID + " AS id"}, "LEFT JOIN office.tasks t"
        joins += " ON t.id = e.task_id"
    elif "row_id" in names and "loop" in fn.arg_names:
        pick, joins = _poison_row(f"${len(_EVENT_LEAD) + _position(fn, 'loop')}")
        alias, encoded = "p", {"row_id": pick}
    else:
        return None
    picks = [encoded.get(c, f"{alias}.{c}") for c in names]
    return f"SELECT {', '.join(picks)}\n      FROM {source} {alias}\n      {joins}"


def _event_helper(fn: Function, source: str) -> tuple[str, str]:
    """A helper returning the rows of ``source`` (on the shard) with the ids
    they name through the proxy (:func:`_encoded_select`)."""
    select = _encoded_select(fn, source)
    assert select is not None, fn.name
    return _helper(fn, "ev", "_part", fn.result, select, _EVENT_LEAD)


def _event_args(
    fn: Function, part: str, replace: dict[int, str] | None = None, home: str | None = None
) -> str:
    """An event helper's arguments: the partition, the partition count, the
    shard's lowest partition (``part`` itself unless ``home`` says), then the
    function's."""
    return _args(fn, f"{part}, office._partitions(), {home or part}", replace)


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


def _merged(column: str, type_: str) -> str | None:
    """How a result column of every shard becomes the one database's: None
    for a column the rows are grouped by (text), else its aggregate."""
    if type_ == "text":
        return None
    if type_.startswith("timestamp"):  # the oldest
        return f"pg_catalog.min({column})"
    if type_ in ("bigint", "integer"):  # counts added; unknown on a shard: unknown
        return (
            f"CASE WHEN pg_catalog.count(*) = pg_catalog.count({column})"
            f" THEN pg_catalog.sum({column})::{type_} END"
        )
    if type_ == "double precision":  # lags and ages: the greatest
        return f"pg_catalog.max({column})"
    if type_ == "boolean":  # exact: every shard exact
        return f"pg_catalog.bool_and({column})"
    if type_ == "jsonb":  # counts per key
        return f"office._jsonb_sum({column})"
    raise LookupError(f"no merge rule for a column of type {type_} ({column})")


def _merged_select(columns: list[tuple[str, str]], source: str, ordered: bool) -> str:
    """The rows of every shard (``source``) merged into one database's:
    grouped by the text columns, in the order the shards return the groups."""
    picks, groups = [], []
    for column, type_ in columns:
        rule = _merged(column, type_)
        picks.append(column if rule is None else f"{rule} AS {column}")
        if rule is None:
            groups.append(column)
    if ordered:
        names = ", ".join(column for column, _ in columns)
        source += f" WITH ORDINALITY AS r({names}, _n)"
    sql = "    SELECT " + ",\n           ".join(picks) + f"\n      FROM {source}"
    if groups:
        sql += f"\n     GROUP BY {', '.join(groups)}"
        if ordered:
            sql += "\n     ORDER BY pg_catalog.min(_n)"
    return sql


# The shards a claim or a budget loop asks in turn: from a random one, so a
# shard that always has work cannot keep the others' work waiting.
_IN_TURN = "SELECT * FROM office._shards() ORDER BY pg_catalog.random()"


def _unreachable_or_raise() -> str:
    # A shard that cannot be reached is left out of a merge (the others keep
    # working); any other error of a shard reaches the caller unchanged.
    return (
        "        EXCEPTION WHEN OTHERS THEN\n"
        "            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;\n"
        "            RAISE WARNING 'office_proxy: shard % skipped: %',\n"
        "                office._shard_name(s.shard), SQLERRM;\n"
    )


def _events_page(fn: Function, before: str, size: str) -> str:
    """A page of events newest first, before a proxy event id: every shard's
    own page below the local id that id names, merged. Ordering by proxy id
    orders a shard's events as their local ids do, so each shard is asked for
    its page of local ids below before_id / P, plus the one event at
    before_id / P, whose proxy id may or may not be below before_id."""
    b, k = _position(fn, before), _position(fn, size)
    lead = len(_EVENT_LEAD)
    own = _params(fn, lead + 1)
    edge = ", ".join(
        f"${lead + b} + 1" if i == b else "1" if i == k else f"${lead + i}"
        for i in range(1, len(fn.arg_names) + 1)
    )
    helper, sql = _event_helper(
        fn,
        f"(SELECT * FROM office.{fn.name}({edge}) x WHERE x.id = ${lead + b}"
        f"\n             UNION ALL SELECT * FROM office.{fn.name}({own}))",
    )
    args = _event_args(fn, "s.part", {b - 1: f"${b} / office._partitions()"})
    body = (
        f"    SELECT e.* FROM office._shards() s CROSS JOIN LATERAL {helper}({args}) e\n"
        f"     WHERE ${b} IS NULL OR e.id < ${b}\n"
        f"     ORDER BY e.id DESC LIMIT CASE WHEN ${k} > 0 THEN ${k} END"
    )
    return sql + _wrapper(fn, "sql", body)


def _events_ack(fn: Function, ids: str) -> str:
    """Proxy event ids acknowledged on the shards they name: grouped by
    partition, each group's local ids acknowledged on its shard if they are
    events of that partition (an id the proxy never returned acknowledges
    nothing, as an unknown id on one database)."""
    at = _position(fn, ids) + len(_EVENT_LEAD)
    select = (
        f"SELECT office.{fn.name}(CASE WHEN ${at} IS NOT NULL THEN ARRAY(\n"
        f"        SELECT e.id FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id\n"
        f"         WHERE e.id = ANY (${at}) AND {_EVENT_PART} = $1) END) AS {fn.name}"
    )
    helper, sql = _helper(fn, "ev", "_part", fn.result, select, _EVENT_LEAD)
    local = {_position(fn, ids) - 1: "g.local_ids"}
    args = _event_args(fn, "g.part", local, "office._home(g.part)")
    body = (
        f"    SELECT coalesce(pg_catalog.sum({helper}({args})), 0)::{fn.result}\n"
        f"      FROM office._event_groups(${_position(fn, ids)}) g"
    )
    return sql + _wrapper(fn, "sql", body)


def _poison(fn: Function, loop: str, row: str) -> str:
    """A call about a row a loop set aside: an event's (loop subscriber, a
    proxy event id) on the shard the id names, if it is an event of that
    partition there; any other on the partition of its entity
    (:data:`POISON_ROWS`), or partition 0 for a row no shard knows."""
    at_loop, at_row = _position(fn, loop), _position(fn, row)
    lead = len(_EVENT_LEAD)
    call = f"office.{fn.name}({_params(fn, lead + 1)})"
    event, sql = _helper(
        fn,
        "ev",
        "_part",
        fn.result,
        f"SELECT CASE WHEN EXISTS (\n"
        f"        SELECT FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id\n"
        f"         WHERE e.id = ${lead + at_row}::bigint AND {_EVENT_PART} <> $1)\n"
        f"    THEN false ELSE {call} END AS {fn.name}",
        _EVENT_LEAD,
    )
    entity, entity_sql = _helper(fn, "on", "_part", fn.result)
    kinds = " ".join(f"WHEN '{loop_}' THEN '{kind}'" for loop_, kind in POISON_ROWS.items())
    local = {at_row - 1: "(v_id / office._partitions())::text"}
    body = (
        "DECLARE\n    v_id bigint;\n    v_part integer;\n    v_kind text;\nBEGIN\n"
        f"    IF ${at_loop} = 'subscriber' AND ${at_row} ~ '^[1-9][0-9]{{0,17}}$' THEN\n"
        f"        v_id := ${at_row}::bigint;\n"
        "        v_part := (v_id & (office._partitions() - 1))::integer;\n"
        f"        RETURN {event}({_event_args(fn, 'v_part', local, 'office._home(v_part)')});\n"
        "    END IF;\n"
        f"    v_kind := CASE ${at_loop} {kinds} END;\n"
        f"    v_part := CASE WHEN v_kind IS NOT NULL THEN office._route(v_kind, ${at_row})"
        " ELSE 0 END;\n"
        f"    RETURN {entity}({_args(fn, 'v_part')});\nEND"
    )
    return sql + entity_sql + _wrapper(fn, "plpgsql", body)


def _split(fn: Function, elements: str, key: str, ordinal: str) -> str:
    """A bulk call split by shard (office._split_requests): each part one
    call on its shard (atomic there), the parts in the order of their first
    element, the outcomes in element order; an element's error names its
    ordinality in the whole call."""
    helper, sql = _helper(fn, "on", "_part", fn.result)
    columns = ", ".join(f"{c} {t}" for c, t in fn.columns)
    element = f"{fn.name} element"
    body = (
        "DECLARE\n    g record;\n    v_out jsonb := '[]';\n    v_state text;\n    v_msg text;\n"
        "    v_detail text;\n    v_n integer;\nBEGIN\n"
        f"    FOR g IN SELECT * FROM office._split_requests(${_position(fn, elements)},"
        f" '{key}') LOOP\n"
        "        BEGIN\n"
        "            v_out := v_out || coalesce((\n"
        "                SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r)\n"
        f"                       || pg_catalog.jsonb_build_object('{ordinal}',"
        f" g.ordinalities[r.{ordinal}]))\n"
        f"                  FROM {helper}(g.part, g.elements) r), '[]');\n"
        "        EXCEPTION WHEN OTHERS THEN\n"
        "            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,\n"
        "                                    v_detail = PG_EXCEPTION_DETAIL;\n"
        f"            v_n := pg_catalog.substring(v_msg, '{element} ([0-9]+):')::integer;\n"
        "            IF v_n IS NOT NULL AND g.ordinalities IS NOT NULL THEN\n"
        f"                v_msg := pg_catalog.regexp_replace(v_msg, '{element} [0-9]+:',\n"
        f"                                                   '{element} '"
        " || g.ordinalities[v_n] || ':');\n"
        "            END IF;\n"
        "            IF v_detail = '' THEN\n"
        "                RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg;\n"
        "            END IF;\n"
        "            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = v_detail;\n"
        "        END;\n    END LOOP;\n"
        f"    RETURN QUERY SELECT x.* FROM pg_catalog.jsonb_to_recordset(v_out) AS x({columns})\n"
        f"                  ORDER BY x.{ordinal};\nEND"
    )
    return sql + _wrapper(fn, "plpgsql", body)


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
        # A limit below 1 or NULL goes to the shards unlimited, so their
        # answer (22023, or no rows) reaches the caller rather than the
        # proxy's own LIMIT error or a LIMIT 0 that never asks them.
        body = (
            f"    SELECT * FROM {helper}({_args(fn, '0')}) ORDER BY {route[2]}"
            f" LIMIT CASE WHEN {limit} > 0 THEN {limit} END"
        )
        return sql + _wrapper(fn, "sql", body)
    if isinstance(route, tuple) and route[0] == "budget":
        # Event ids are encoded on the way out (office._event_groups).
        source = f"office.{fn.name}({_params(fn, len(_EVENT_LEAD) + 1)})"
        events = _encoded_select(fn, source) is not None
        if events:
            helper, sql = _event_helper(fn, source)
        else:
            helper, sql = _helper(fn, "on", "_part", fn.result)
        k = _position(fn, route[1])

        def call(part: str, replace: dict[int, str] | None = None) -> str:
            return _event_args(fn, part, replace) if events else _args(fn, part, replace)

        body = (
            "DECLARE\n    s record;\n    v_left integer := ${k};\n    v_n integer;\nBEGIN\n"
            "    IF v_left IS NULL OR v_left < 1 THEN  -- the shard's own answer (22023, or none)\n"
            "        RETURN QUERY SELECT * FROM {helper}({first});\n        RETURN;\n    END IF;\n"
            f"    FOR s IN {_IN_TURN} LOOP\n"
            "        EXIT WHEN v_left = 0;\n        BEGIN\n"
            "            RETURN QUERY SELECT * FROM {helper}({each});\n"
            "            GET DIAGNOSTICS v_n = ROW_COUNT;\n            v_left := v_left - v_n;\n"
            "{skip}        END;\n    END LOOP;\nEND"
        ).format(
            k=k,
            helper=helper,
            first=call("0"),
            each=call("s.part", {k - 1: "v_left"}),
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
            f"    FOR s IN {_IN_TURN} LOOP\n        BEGIN\n"
            f"            RETURN QUERY SELECT * FROM {helper}(s.part, $1, $2);\n"
            "            IF FOUND THEN RETURN; END IF;\n"
            f"{_unreachable_or_raise()}        END;\n    END LOOP;\nEND"
        )
        return sql + _wrapper(fn, "plpgsql", body)
    if route == "merge":
        helper, sql = _helper(fn, "all", "ALL", _setof(fn.result))
        body = _merged_select(fn.columns, f"{helper}({_args(fn, '0')})", ordered=True)
        return sql + _wrapper(fn, "sql", body)
    if isinstance(route, tuple) and route[0] == "events_page":
        return _events_page(fn, route[1], route[2])
    if isinstance(route, tuple) and route[0] == "events_ack":
        return _events_ack(fn, route[1])
    if isinstance(route, tuple) and route[0] == "poison":
        return _poison(fn, route[1], route[2])
    if isinstance(route, tuple) and route[0] == "split":
        return _split(fn, route[1], route[2], route[3])
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
    """The stats views over every shard, merged as :func:`_merged` says
    (text columns group, counts are added, timestamps take the oldest)."""
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
        merged = _merged_select(
            list(zip(columns, types, strict=True)), f"office._all_{name}(0)", ordered=False
        )
        out.append(f"CREATE VIEW office.{name} AS\n{merged};\n")
        if comment is not None:
            quoted = comment.replace("'", "''")
            out.append(f"COMMENT ON VIEW office.{name} IS\n    '{quoted}';\n")
        out.append(f"REVOKE ALL ON office.{name} FROM PUBLIC;\n")
        if grantees:
            out.append(f"GRANT SELECT ON office.{name} TO {', '.join(grantees)};\n")
    return "".join(out)


_POISON = """
SELECT pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT a.grantee::regrole::text FROM pg_catalog.aclexplode(c.relacl) a
              WHERE a.privilege_type = 'SELECT' AND a.grantee <> 0 AND a.grantee <> c.relowner
              ORDER BY 1),
       ARRAY(SELECT ARRAY[a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)]
               FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
  FROM pg_catalog.pg_class c
 WHERE c.oid = 'office.poison'::regclass
"""


def poison_sql(conn: psycopg.Connection[Any]) -> str:
    """``office.poison`` on the proxy: a view of every shard's set-aside rows
    (what the dashboard and doctor read), a subscriber row by its event's id
    through the proxy, as take_poison_reports returns it."""
    row = conn.execute(_POISON).fetchone()
    assert row is not None
    comment, grantees, columns = row
    table = ", ".join(f"{c} {t}" for c, t in columns)
    pick, joins = _poison_row("p.loop")
    picks = ", ".join(pick if c == "row_id" else f"p.{c}" for c, _ in columns)
    signature = "office._all_poison(integer, integer, integer)"
    out = [
        f"CREATE FUNCTION office._all_poison({', '.join(_EVENT_LEAD)}) RETURNS TABLE({table})\n"
        "    LANGUAGE plproxy\n    SET search_path = pg_catalog, pg_temp\n"
        "AS $$\n    CLUSTER 'office_cluster';\n    RUN ON _part;\n"
        f"    SELECT {picks}\n      FROM office.poison p\n      {joins};\n$$;\n"
        f"COMMENT ON FUNCTION {signature} IS\n"
        "    'Internal: office.poison of the shard of partition _part'\n"
        "    ' (subscriber rows by their event''s id through the proxy).';\n"
        f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC;\n",
        "CREATE VIEW office.poison AS\n"
        "    SELECT p.* FROM office._shards() s\n"
        "     CROSS JOIN LATERAL office._all_poison(s.part, office._partitions(), s.part) p;\n",
    ]
    if comment is not None:
        quoted = comment.replace("'", "''")
        out.append(f"COMMENT ON VIEW office.poison IS\n    '{quoted}';\n")
    out.append("REVOKE ALL ON office.poison FROM PUBLIC;\n")
    if grantees:
        out.append(f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(grantees)};\n")
        out.append(f"GRANT SELECT ON office.poison TO {', '.join(grantees)};\n")
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
    parts.append("\n" + poison_sql(conn))
    return "".join(parts)


def main() -> None:
    with psycopg.connect(sys.argv[1]) as conn:
        sys.stdout.write(generate(conn))


if __name__ == "__main__":
    main()
