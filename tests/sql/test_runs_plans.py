"""The run-queue functions keep using their indexes after the queue was
analyzed while empty (a fresh install, a drained queue): PL/pgSQL's cached
generic plans would otherwise be sequential scans that every long-lived
session keeps until the next analyze (sql/30_runs.sql, "Plans")."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import sql

from tests import harness
from tools import reference

HOT_PATH = (
    "office.enqueue_run(text, text, jsonb, text, text, boolean, text, text,"
    " text, text, int, timestamptz)",
    "office.claim_run(text, text)",
    "office.finish_run(text, integer, text)",
)


def _exercise(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Enqueue (fresh, repeated, coalescing), claim and finish, more often than
    the 5 custom plans PL/pgSQL makes before it settles on a generic one, all in
    one transaction; return the sequential scans it made per office table."""
    with harness.table_reads(conn) as reads:
        for i in range(12):
            conn.execute(
                "SELECT office.enqueue_run('a1', 'task_assigned', '{}', %s, %s)",
                (f"task_assigned:t{i}:a1:1", f"t{i}"),
            )
            conn.execute(
                "SELECT office.enqueue_run('a1', 'task_assigned', '{}', %s, %s)",
                (f"task_assigned:t{i}:a1:1", f"t{i}"),
            )
            conn.execute("SELECT office.enqueue_run('a2', 'heartbeat')")
            claimed = conn.execute("SELECT id, attempt FROM office.claim_run()").fetchone()
            assert claimed is not None
            conn.execute("SELECT office.finish_run(%s, %s)", claimed)
    return {name: read.seq_scan for name, read in reads.items()}


def _analyze_empty(db: psycopg.Connection[Any]) -> None:
    db.execute("VACUUM ANALYZE office.runs")
    db.execute("SELECT office.upsert_agent(id, 'w') FROM unnest(ARRAY['a1', 'a2']) AS id")
    db.execute("VACUUM ANALYZE office.agent_profiles")
    assert db.execute(
        "SELECT reltuples FROM pg_class WHERE oid = 'office.runs'::regclass"
    ).fetchone() == (0.0,)


def test_hot_path_functions_never_scan_the_queue_after_an_empty_analyze(
    db: psycopg.Connection[Any],
) -> None:
    _analyze_empty(db)
    scans = _exercise(db)
    assert scans.get("runs", 0) == 0, scans
    assert scans.get("agent_profiles", 0) == 0, scans


def test_without_the_setting_the_queue_is_scanned(db: psycopg.Connection[Any]) -> None:
    # The hazard the setting guards against is real: take it away and the
    # same work reads the whole queue. Where a function is C (it plans its
    # statements with the setting itself), its PL/pgSQL definition goes back
    # under its name first, the other settings kept.
    for function in HOT_PATH:
        row = db.execute(
            "SELECT l.lanname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)"
            " FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
            " WHERE p.oid = %s::regprocedure",
            [function],
        ).fetchone()
        assert row is not None
        language, arguments, result = row
        if language == "c":
            _, body = reference.portable(function.split("(")[0].removeprefix("office."))
            bitmaps = " SET enable_bitmapscan = off" if "claim_run" in function else ""
            db.execute(
                sql.SQL(
                    "CREATE OR REPLACE FUNCTION {}({}) RETURNS {} LANGUAGE plpgsql"
                    " SECURITY DEFINER SET search_path = pg_catalog, pg_temp{} AS {}"
                ).format(
                    sql.SQL(function.split("(")[0]),
                    sql.SQL(arguments),
                    sql.SQL(result),
                    sql.SQL(bitmaps),
                    sql.Literal(body),
                )
            )
        else:
            db.execute(f"ALTER FUNCTION {function} RESET enable_seqscan")
    _analyze_empty(db)
    assert _exercise(db).get("runs", 0) > 0


def test_bulk_enqueue_never_scans_the_queue_after_an_empty_analyze(
    db: psycopg.Connection[Any],
) -> None:
    # enqueue_runs' set-based checks (a recorded key, a queued run in a
    # coalescible element's bucket) and its per-element path are index probes.
    _analyze_empty(db)
    with harness.table_reads(db) as reads:
        for i in range(12):
            fresh = [
                {
                    "agent_profile_id": a,
                    "reason": "task_assigned",
                    "task_id": f"t{i}-{n}",
                    "idempotency_key": f"task_assigned:t{i}-{n}:{a}:1",
                }
                for n, a in enumerate(["a1", "a2", "a1"])
            ]
            coalescing = [{"agent_profile_id": "a2", "reason": "heartbeat"}] * 2
            for batch in (fresh, coalescing, fresh):
                db.execute(
                    "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)", [json.dumps(batch)]
                )
    scans = {name: read.seq_scan for name, read in reads.items()}
    assert scans.get("runs", 0) == 0, scans
    assert scans.get("run_keys_recorded", 0) == 0, scans
    assert scans.get("agent_profiles", 0) == 0, scans


def _entries_read(
    plans: list[dict[str, Any]], *, per_loop: bool = False
) -> dict[tuple[str, str], int]:
    """The most rows any one scan read, per (statement's first words, index or
    table of a sequential scan): its rows, plus those its filter removed, over
    all its loops (or, with ``per_loop``, in one loop: a probe made once per
    element of a bulk call reads a few entries each time)."""
    most: dict[tuple[str, str], int] = {}

    def walk(statement: str, node: dict[str, Any]) -> None:
        if "Index Name" in node or node["Node Type"] == "Seq Scan":
            read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            if not per_loop:
                read *= node["Actual Loops"]
            key = (statement, node.get("Index Name", node.get("Relation Name", "")))
            most[key] = max(most.get(key, 0), round(read))
        for child in node.get("Plans", []):
            walk(statement, child)

    for plan in plans:
        walk(" ".join(plan["Query Text"].split()[:6]), plan["Plan"])
    return most


def _explained(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """From now on, every statement ``db`` runs, nested ones included, adds
    its plan (auto_explain, with actual rows, as JSON) to the list returned."""
    plans: list[dict[str, Any]] = []
    db.add_notice_handler(
        lambda notice: (
            plans.append(json.loads(notice.message_primary.split("plan:", 1)[1]))
            if notice.message_primary and "plan:" in notice.message_primary
            else None
        )
    )
    db.execute(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
        " SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on;"
        " SET auto_explain.log_format = json; SET auto_explain.log_level = notice"
    )
    return plans


def test_hot_path_lookups_read_a_few_entries_whatever_the_queue_holds(
    db: psycopg.Connection[Any],
) -> None:
    # The generic plans settle on an empty analyze; then two agents get 300
    # queued runs each, all within the coalesce window (one transaction: one
    # now()), each of another task or reason, 300 other agents a claimed run
    # and another 300 a readiness row each. A statement that walks an
    # agent's queued runs, the claimed runs or the readiness list instead of
    # its key's index entries reads hundreds. claim_run() looks at 8 listed
    # agents by design (sql/30_runs.sql).
    _analyze_empty(db)
    db.autocommit = False
    _exercise(db)
    db.execute(
        "SELECT office.upsert_agent('other-' || n, 'w') FROM generate_series(1, 600) n;"
        " SELECT office.enqueue_run('other-' || n, 'heartbeat') FROM generate_series(1, 600) n;"
        " SELECT office.claim_run('w', 'other-' || n) FROM generate_series(301, 600) n;"
        " SELECT office.enqueue_run('a1', 'task_assigned', '{}', 'k-' || n, 'task-' || n)"
        "   FROM generate_series(1, 300) n;"
        " SELECT office.enqueue_run('a2', 'reason-' || n) FROM generate_series(1, 300) n"
    )
    plans = _explained(db)
    db.execute("SELECT office.enqueue_run('a1', 'task_assigned', '{}', 'k-new', 'task-new')")
    db.execute("SELECT office.enqueue_run('a1', 'task_assigned', '{}', 'k-7', 'task-7')")
    db.execute("SELECT office.enqueue_run('a2', 'reason-new')")
    db.execute("SELECT office.enqueue_run('other-1', 'heartbeat')")
    db.execute(
        "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)",
        [
            json.dumps(
                [
                    {"agent_profile_id": "a1", "reason": "r", "task_id": f"bulk-{n}"}
                    for n in range(3)
                ]
                + [{"agent_profile_id": "a2", "reason": "bulk-r"}]
            )
        ],
    )
    claimed = db.execute("SELECT id, attempt FROM office.claim_run()").fetchone()
    assert claimed is not None
    db.execute("SELECT office.heartbeat_run(%s, %s)", claimed)
    db.execute("SELECT office.finish_run(%s, %s)", claimed)
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w', 'a2')").fetchone()
    assert claimed is not None
    db.execute("SELECT office.fail_run(%s, %s, 'e')", claimed)
    reads = _entries_read(plans)
    # Not vacuous: the statements of several functions were seen. Fewer
    # where enqueue_run and claim_run are C: their looks are index scans of
    # their own, which no plan shows (test_runs_claim.py counts the rows a
    # claim fetches, and test_native.py compares both definitions).
    native = db.execute(
        "SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.oid = 'office.claim_run(text, text)'::regprocedure AND l.lanname = 'c'"
    ).fetchone()
    assert len(reads) > (5 if native == (1,) else 10), reads
    assert {k: n for k, n in reads.items() if n > 8} == {}


def test_hot_path_probes_read_a_few_entries_when_the_statistics_see_a_backlog(
    db: psycopg.Connection[Any],
) -> None:
    # The opposite of an empty analyze: 32 agents with about 300 queued runs
    # each, analyzed. The wake-up signal of a bulk call looks, per agent, for
    # due runs beyond those the call queued (LIMIT the call's own + 1); as a
    # bitmap scan it read every queued run of every agent in the call before
    # the LIMIT applied (300 a probe here, 2,000 in bench/hotpath.py's
    # queue), so a bulk enqueue cost what the agents' backlog held.
    db.execute("SELECT office.upsert_agent('b' || n, 'w') FROM generate_series(1, 32) n")
    db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, task_id)"
        " SELECT 'b' || (1 + n % 32), 'task_assigned', 'task-' || n"
        " FROM generate_series(1, 10000) n"
    )
    db.execute("VACUUM ANALYZE office.runs")
    plans = _explained(db)
    for elements in (
        [
            {"agent_profile_id": f"b{n}", "reason": "r", "task_id": f"bulk-{n}"}
            for n in range(1, 33)
        ],
        [{"agent_profile_id": f"b{n}", "reason": "r"} for n in range(1, 33)],
    ):
        rows = db.execute(
            "SELECT outcome FROM office.enqueue_runs(%s::jsonb)", [json.dumps(elements)]
        ).fetchall()
        assert rows == [("queued",)] * 32
    # Element by element: each coalesces into the run the call above queued.
    rows = db.execute(
        "SELECT outcome FROM office.enqueue_runs(%s::jsonb)",
        [json.dumps([{"agent_profile_id": "b1", "reason": "r"}] * 3)],
    ).fetchall()
    assert rows == [("coalesced",)] * 3
    # The single calls, under the same statistics.
    db.execute("SELECT office.enqueue_run('b1', 'task_assigned', '{}', 'k-1', 'task-new')")
    db.execute("SELECT office.enqueue_run('b1', 'task_assigned', '{}', 'k-1', 'task-new')")
    db.execute("SELECT office.enqueue_run('b2', 'r')")
    claimed = db.execute("SELECT id, attempt FROM office.claim_run()").fetchone()
    assert claimed is not None
    db.execute("SELECT office.heartbeat_run(%s, %s)", claimed)
    db.execute("SELECT office.finish_run(%s, %s)", claimed)
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w', 'b3')").fetchone()
    assert claimed is not None
    db.execute("SELECT office.fail_run(%s, %s, 'e')", claimed)
    reads = _entries_read(plans, per_loop=True)
    # The bulk signal's per-agent probes, a statement of _signal_runs where it
    # is PL/pgSQL (where it is native, sql/native/, they are index scans).
    native = db.execute(
        "SELECT l.lanname = 'c' FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.oid = 'office._signal_runs(text[], text[])'::regprocedure"
    ).fetchone()
    if native == (False,):
        assert any(statement.startswith("SELECT a.agent") for statement, _ in reads), reads
    assert {k: n for k, n in reads.items() if n > 8} == {}
