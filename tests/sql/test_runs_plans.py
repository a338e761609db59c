"""The run-queue functions keep using their indexes after the queue was
analyzed while empty (a fresh install, a drained queue): PL/pgSQL's cached
generic plans would otherwise be sequential scans that every long-lived
session keeps until the next analyze (sql/30_runs.sql, "Plans")."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests import harness

HOT_PATH = (
    "office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)",
    "office.claim_run(text, text)",
    "office.finish_run(text, integer)",
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
    # same work reads the whole queue.
    for function in HOT_PATH:
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
