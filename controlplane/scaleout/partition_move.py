"""Moving a partition of a cluster to another shard database
(``officectl cluster move``; docs/scale-out.md "Move a partition" says what
is safe and why): the partition's rows copied to the target, server
``office_cluster`` switched, the rows deleted on the source."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from controlplane.scaleout import partition_fence
from controlplane.scaleout.cluster import ClusterError, plproxy_conninfo, shard_connstrs, with_user
from controlplane.scaleout.shards import SERVER, mask

log = logging.getLogger(__name__)

#
# The rows of a partition are the rows of its workspaces' entities. The id
# sets are collected once per transaction into temporary tables, so the
# selections below stay fixed while rows are deleted in any order.
_ID_SETS: tuple[tuple[str, str], ...] = (
    ("move_agents", "SELECT id FROM office.agent_profiles WHERE {ws}"),
    ("move_tasks", "SELECT id FROM office.tasks WHERE {ws}"),
    ("move_routines", "SELECT id FROM office.routines WHERE {ws}"),
    (
        "move_runs",
        "SELECT id FROM office.runs WHERE agent_profile_id IN (SELECT id FROM pg_temp.move_agents)"
        " OR task_id IN (SELECT id FROM pg_temp.move_tasks)",
    ),
    (
        "move_wakeups",
        "SELECT id FROM office.wakeup_requests"
        " WHERE agent_profile_id IN (SELECT id FROM pg_temp.move_agents)",
    ),
    (
        "move_triggers",
        "SELECT id FROM office.routine_triggers"
        " WHERE routine_id IN (SELECT id FROM pg_temp.move_routines)",
    ),
    (
        # Policy and spend rows: by agent, or by a workspace of the partition
        # (a workspace's rows need not have agents).
        "move_scopes",
        "SELECT 'agent' AS scope, id AS scope_id FROM pg_temp.move_agents"
        " UNION SELECT 'workspace', workspace_id FROM ("
        "SELECT scope_id AS workspace_id FROM office.wake_policies WHERE scope = 'workspace'"
        " UNION SELECT scope_id FROM office.wake_spend WHERE scope = 'workspace') w WHERE {ws}",
    ),
    (
        "move_events",
        "SELECT id::text AS id FROM office.events"
        " WHERE task_id IN (SELECT id FROM pg_temp.move_tasks)",
    ),
)

# Every office table that holds workspace data, in foreign-key order (parents
# first), with the rows of the moved workspaces. tests/proxy/test_proxy_move.py
# checks this list plus STAYING against the catalog, so a new table cannot be
# forgotten.
MOVED_TABLES: tuple[tuple[str, str], ...] = (
    ("agent_profiles", "id IN (SELECT id FROM pg_temp.move_agents)"),
    ("tasks", "id IN (SELECT id FROM pg_temp.move_tasks)"),
    ("task_blockers", "task_id IN (SELECT id FROM pg_temp.move_tasks)"),
    ("routines", "id IN (SELECT id FROM pg_temp.move_routines)"),
    ("routine_triggers", "id IN (SELECT id FROM pg_temp.move_triggers)"),
    ("runs", "id IN (SELECT id FROM pg_temp.move_runs)"),
    ("run_keys_recorded", "run_id IN (SELECT id FROM pg_temp.move_runs)"),
    ("agent_ready", "agent_profile_id IN (SELECT id FROM pg_temp.move_agents)"),
    ("wakeup_requests", "id IN (SELECT id FROM pg_temp.move_wakeups)"),
    ("routine_runs", "routine_id IN (SELECT id FROM pg_temp.move_routines)"),
    ("events", "id::text IN (SELECT id FROM pg_temp.move_events)"),
    ("parent_child_wake_receipts", "parent_task_id IN (SELECT id FROM pg_temp.move_tasks)"),
    ("parent_wake_marks", "parent_task_id IN (SELECT id FROM pg_temp.move_tasks)"),
    ("wake_decisions", "agent_profile_id IN (SELECT id FROM pg_temp.move_agents)"),
    ("wake_policies", "(scope, scope_id) IN (SELECT scope, scope_id FROM pg_temp.move_scopes)"),
    ("wake_spend", "(scope, scope_id) IN (SELECT scope, scope_id FROM pg_temp.move_scopes)"),
    ("wake_claims", "agent_profile_id IN (SELECT id FROM pg_temp.move_agents)"),
    (
        "poison",  # row_id names a row of the loop's table (COMMENT ON TABLE office.poison)
        "(loop = 'subscriber' AND row_id IN (SELECT id FROM pg_temp.move_events))"
        " OR (loop = 'wakeups' AND row_id IN (SELECT id FROM pg_temp.move_wakeups))"
        " OR (loop = 'cron' AND row_id IN (SELECT id FROM pg_temp.move_triggers))"
        " OR (loop = 'sweep' AND row_id IN (SELECT id FROM pg_temp.move_tasks))"
        " OR (loop = 'recovery' AND row_id IN (SELECT id FROM pg_temp.move_runs))",
    ),
)

# Tables that stay: the dedup and keyless counters are statistics of the
# shard by slot, not by workspace; leaving them keeps the proxy's summed
# stats views unchanged by a move.
STAYING = frozenset({"dedup_counters", "keyless_counters"})


class MoveResult(BaseModel):
    partition: int
    source: str  # connection strings, password masked
    target: str
    rows: dict[str, int]  # table -> rows copied (or purged, for a finished move)
    switched: bool  # server office_cluster routes the partition to the target
    forced: bool


MoveProgress = Callable[[str, int], None]  # (table, rows) after each table


def _collect(cur: psycopg.Cursor[Any], partitions: int, partition: int) -> None:
    ws = sql.SQL("hashtext(workspace_id) & {} = {}").format(
        sql.Literal(partitions - 1), sql.Literal(partition)
    )
    for name, query in _ID_SETS:
        cur.execute(
            sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS ").format(sql.Identifier(name))
            + sql.SQL(query).format(ws=ws)
        )


def _where(table: str, rule: str) -> sql.Composed:
    return sql.SQL("FROM office.{} WHERE {}").format(sql.Identifier(table), sql.SQL(rule))


def _delete_partition(cur: psycopg.Cursor[Any]) -> dict[str, int]:
    """Delete the collected rows, children first. The caller has set
    session_replication_role = replica: no trigger reacts to a row leaving
    (no wake marks, no ready bookkeeping, no cascade: every table is listed)."""
    deleted: dict[str, int] = {}
    for table, rule in reversed(MOVED_TABLES):
        cur.execute(sql.SQL("DELETE ") + _where(table, rule))
        deleted[table] = cur.rowcount
    return deleted


def _columns(cur: psycopg.Cursor[Any], table: str) -> sql.Composed:
    """The table's stored columns by name (a column added later is copied too)."""
    rows = cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        (f"office.{table}",),
    ).fetchall()
    return sql.SQL(", ").join(sql.Identifier(r[0]) for r in rows)


_IDENTITIES = (
    "SELECT a.attname, pg_get_serial_sequence(c.oid::regclass::text, a.attname), c.relname"
    " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    " WHERE c.relnamespace = 'office'::regnamespace AND a.attidentity <> ''"
)


def _sequence_floors(cur: psycopg.Cursor[Any]) -> dict[str, int]:
    """The last id each identity sequence of the source handed out."""
    floors: dict[str, int] = {}
    for _, sequence, _ in cur.execute(_IDENTITIES).fetchall():
        row = cur.execute(
            sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {}").format(
                sql.SQL(sequence)  # pg_get_serial_sequence quotes it
            )
        ).fetchone()
        floors[sequence] = int(row[0]) if row else 0
    return floors


def _raise_sequences(cur: psycopg.Cursor[Any], floors: dict[str, int]) -> None:
    """Identity sequences above every id their table holds and every id the
    source ever handed out (``floors``), so the target never hands out an id
    it received, nor one a stale proxy event id of the partition could name
    (proxy event ids embed the local id: docs/scale-out.md)."""
    for column, sequence, table in cur.execute(_IDENTITIES).fetchall():
        cur.execute(
            sql.SQL(
                "SELECT setval({seq}, greatest(max({col}), {floor})) FROM office.{t}"
                " HAVING greatest(max({col}), {floor}) >= (SELECT CASE WHEN is_called"
                " THEN last_value + 1 ELSE last_value END FROM {seq_table})"
            ).format(
                seq=sql.Literal(sequence),
                col=sql.Identifier(column),
                floor=sql.Literal(floors.get(sequence, 0)),
                t=sql.Identifier(table),
                seq_table=sql.SQL(sequence),  # pg_get_serial_sequence quotes it
            )
        )


def _in_flight(cur: psycopg.Cursor[Any]) -> list[str]:
    row = cur.execute(
        "SELECT (SELECT count(*) FROM office.runs WHERE status = 'claimed'"
        "         AND id IN (SELECT id FROM pg_temp.move_runs)),"
        " (SELECT count(*) FROM office.events WHERE processed_at IS NULL"
        "         AND claimed_by IS NOT NULL AND visible_at > now()"
        "         AND id::text IN (SELECT id FROM pg_temp.move_events))"
    ).fetchone()
    assert row is not None
    found = [f"{row[0]} claimed runs"] if row[0] else []
    return found + ([f"{row[1]} claimed unacknowledged events"] if row[1] else [])


def _by_partition(shards: list[tuple[str, tuple[int, ...]]]) -> list[str]:
    """Each partition's connection string, in partition order."""
    by_part = {p: connstr for connstr, parts in shards for p in parts}
    return [by_part[p] for p in sorted(by_part)]


def _switch(proxy: str, partition: int, target: str) -> None:
    with psycopg.connect(proxy, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER SERVER {} OPTIONS (SET {} {})").format(
                sql.Identifier(SERVER), sql.Identifier(f"p{partition}"), sql.Literal(target)
            )
        )


def _purge_elsewhere(
    proxy: str, partitions: list[str], partition: int, user: str | None
) -> dict[str, int]:
    """A move that switched but stopped before deleting left the rows on
    its source: delete the partition's rows on every shard that does not own it
    (no call reaches them there)."""
    purged: dict[str, int] = {}
    owner = partitions[partition]
    for connstr in dict.fromkeys(c for c in partitions if c != owner):
        with psycopg.connect(with_user(connstr, user)) as conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            _collect(cur, len(partitions), partition)
            for table, n in _delete_partition(cur).items():
                purged[table] = purged.get(table, 0) + n
    return purged


def move_partition(
    proxy: str,
    partition: int,
    target: str,
    *,
    force: bool = False,
    rehearse: bool = False,
    progress: MoveProgress | None = None,
) -> MoveResult:
    """Move partition ``partition`` of the proxy's cluster to the shard
    database ``target`` (a connection string as office_cluster spells it):
    docs/scale-out.md "Move a partition" says what is safe and why.

    The source's office tables are locked against writes (SHARE) for the whole
    move; the rows are copied in one target transaction with triggers off,
    the server is switched, the source fenced (controlplane/scaleout/partition_fence.py:
    no session can still write the partition there), then the rows are
    deleted on the source in its one transaction. ``rehearse`` copies and
    stops before the switch (the source keeps serving; a later move replaces
    the copy)."""
    target = plproxy_conninfo(target)  # as init writes a shard (PL/Proxy appends user=)
    shards, user = shard_connstrs(proxy)
    partitions = _by_partition(shards)
    if not 0 <= partition < len(partitions):
        raise ClusterError(
            f"--partition must be between 0 and {len(partitions) - 1}, not {partition}"
        )
    source = partitions[partition]

    def result(rows: dict[str, int], switched: bool) -> MoveResult:
        return MoveResult(
            partition=partition,
            source=mask(source),
            target=mask(target),
            rows=rows,
            switched=switched,
            forced=force,
        )

    if source == target:
        # Already switched: only a source that kept its rows may be left.
        return result(_purge_elsewhere(proxy, partitions, partition, user), True)
    identity = "SELECT system_identifier, current_database() FROM pg_control_system()"
    with psycopg.connect(with_user(source, user)) as src_conn:
        version = src_conn.execute("SELECT office.schema_version()").fetchone()
        assert version is not None
        source_identity = src_conn.execute(identity).fetchone()
    with psycopg.connect(with_user(target, user), autocommit=True) as conn:
        if conn.execute(identity).fetchone() == source_identity:
            # Spelled differently, but the source itself: its own locks would
            # block the copy forever.
            raise ClusterError(
                f"the target is partition {partition}'s shard already ({mask(source)})"
            )
        conn.execute(
            sql.SQL("CREATE EXTENSION IF NOT EXISTS office VERSION {}").format(
                sql.Literal(version[0])
            )
        )
        got = conn.execute("SELECT office.schema_version()").fetchone()
    if got is None or got[0] != version[0]:
        raise ClusterError(
            f"the target runs office {got[0] if got else None}, the source {version[0]}:"
            " upgrade one of them first"
        )
    copied: dict[str, int] = {}
    with (
        psycopg.connect(with_user(source, user)) as src_conn,
        psycopg.connect(with_user(target, user)) as tgt_conn,
        src_conn.cursor() as src,
        tgt_conn.cursor() as tgt,
    ):
        # Writers of the source wait from here to the end; readers do not.
        src.execute(
            sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
                sql.SQL(", ").join(sql.Identifier("office", table) for table, _ in MOVED_TABLES)
            )
        )
        _collect(src, len(partitions), partition)
        in_flight = _in_flight(src)
        if in_flight and not force:
            raise ClusterError(
                f"partition {partition} has {' and '.join(in_flight)}: wait for them, or"
                " --force (see docs/scale-out.md: their holders must use the proxy)"
            )
        # Triggers off on the target: the rows arrive as they are (no events,
        # no wake marks, no generation bump), foreign keys included.
        tgt.execute("SET LOCAL session_replication_role = replica")
        _collect(tgt, len(partitions), partition)
        _delete_partition(tgt)  # what an interrupted earlier move left
        for table, rule in MOVED_TABLES:
            columns = _columns(src, table)
            with (
                src.copy(
                    sql.SQL("COPY (SELECT {} {}) TO STDOUT (FORMAT binary)").format(
                        columns, _where(table, rule)
                    )
                ) as out,
                tgt.copy(
                    sql.SQL("COPY office.{} ({}) FROM STDIN (FORMAT binary)").format(
                        sql.Identifier(table), columns
                    )
                ) as into,
            ):
                for block in out:
                    into.write(block)
            copied[table] = tgt.rowcount
            if progress is not None:
                progress(table, copied[table])
        _raise_sequences(tgt, _sequence_floors(src))
        tgt_conn.commit()
        if rehearse:
            src_conn.rollback()
            return result(copied, False)
        _switch(proxy, partition, target)
        with psycopg.connect(proxy, autocommit=True) as px:
            ended = partition_fence.wait_out_proxy(px, partition_fence.switched_at(px), src)
        if ended:
            log.warning(
                "partition %d: ended %d proxy sessions older than the switch", partition, ended
            )
        partition_fence.exclusive(src, (table for table, _ in MOVED_TABLES))
        src.execute("SET LOCAL session_replication_role = replica")
        _delete_partition(src)
        src_conn.commit()
    log.info("partition %d moved to %s: %s", partition, mask(target), copied)
    return result(copied, True)
