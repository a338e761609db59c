"""The SQL of one proxy wrapper: for a shard function (as
:func:`controlplane.scaleout.proxy.shard_functions` reads it), the PL/Proxy or
PL/pgSQL function on the proxy that routes or merges it as
:data:`controlplane.scaleout.proxy_routes.ROUTES` says, with its comment and grants.
Routing and merging are explained in docs/scale-out.md."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.scaleout.proxy_routes import CHECKS, FALLBACKS, POISON_ROWS, ROUTES


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
EVENT_LEAD = ["_part integer", "_parts integer", "_home integer"]


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
def poison_row(loop: str) -> tuple[str, str]:
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
        pick, joins = poison_row(f"${len(EVENT_LEAD) + _position(fn, 'loop')}")
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
    return _helper(fn, "ev", "_part", fn.result, select, EVENT_LEAD)


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


def merged_select(columns: list[tuple[str, str]], source: str, ordered: bool) -> str:
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
    lead = len(EVENT_LEAD)
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
    at = _position(fn, ids) + len(EVENT_LEAD)
    select = (
        f"SELECT office.{fn.name}(CASE WHEN ${at} IS NOT NULL THEN ARRAY(\n"
        f"        SELECT e.id FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id\n"
        f"         WHERE e.id = ANY (${at}) AND {_EVENT_PART} = $1) END) AS {fn.name}"
    )
    helper, sql = _helper(fn, "ev", "_part", fn.result, select, EVENT_LEAD)
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
    lead = len(EVENT_LEAD)
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
        EVENT_LEAD,
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
            f"office.{fn.name} has no route on the proxy"
            " (ROUTES in controlplane/scaleout/proxy_routes.py)"
        )
    star = "SELECT * FROM" if fn.composite_result else "SELECT"
    if route == "local":
        return fn.definition.rstrip() + ";\n"
    if isinstance(route, tuple) and route[0] in ("workspace", "entity"):
        arg = route[-1]
        at = f"${_position(fn, arg)}"
        checks = CHECKS.get(fn.name)
        located = f"office._workspace_of('{route[1]}', {at})"
        fallback = FALLBACKS.get(fn.name)
        if fallback is not None:
            kind, other = fallback
            located = (
                f"coalesce({located}, office._workspace_of('{kind}', ${_position(fn, other)}))"
            )
        workspace = at if route[0] == "workspace" else located
        if checks:
            items = ", ".join(
                f"'{kind}', ${_position(fn, arg)}, '{code}'" for kind, arg, code in checks
            )
            part = f"office._checked_partition({workspace}, ARRAY[{items}])"
        elif route[0] == "workspace" or fallback is not None:
            part = f"office._partition({workspace})"
        else:
            part = f"office._route('{route[1]}', {at})"
        helper, sql = _helper(fn, "on", "_part", fn.result)
        return sql + _wrapper(fn, "sql", f"    {star} {helper}({_args(fn, part)})")
    if isinstance(route, tuple) and route[0] == "scope":
        # An agent scope on its agent's partition, a workspace scope on the
        # workspace's; anything else on partition 0, whose shard answers as
        # one database would (22023, OFA01).
        scope, scope_id = f"${_position(fn, route[1])}", f"${_position(fn, route[2])}"
        part = (
            f"CASE {scope} WHEN 'agent' THEN office._route('agent', {scope_id})"
            f" WHEN 'workspace' THEN coalesce(office._partition({scope_id}), 0) ELSE 0 END"
        )
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
        source = f"office.{fn.name}({_params(fn, len(EVENT_LEAD) + 1)})"
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
        body = merged_select(fn.columns, f"{helper}({_args(fn, '0')})", ordered=True)
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


def grants_sql(fn: Function) -> str:
    signature = f"office.{fn.name}({fn.identity})"
    lines = []
    if fn.comment is not None:
        quoted = fn.comment.replace("'", "''")
        lines.append(f"COMMENT ON FUNCTION {signature} IS\n    '{quoted}';")
    lines.append(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC;")
    if fn.grantees:
        lines.append(f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(fn.grantees)};")
    return "\n".join(lines) + "\n"
