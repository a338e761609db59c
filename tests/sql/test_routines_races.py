"""Races on routines with real connections (the ``concurrently`` fixture
releases every caller at once), and the control showing the gate spec fails
without its lock. The isolation specs that pin the interleavings
(tests/isolation/specs/routines_*.spec) run in
tests/sql/test_isolation_harness.py."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.scenarios.routines import fire, make_stale, routine, run, runs
from tests.scenarios.tasks import Conn, agent, move

N = 8


def firing(routine_id: str = "R") -> Callable[[Conn], dict[str, Any]]:
    def call(conn: Conn) -> dict[str, Any]:
        return fire(conn, routine_id)

    return call


@pytest.mark.parametrize("policy", ["skip_if_active", "coalesce_if_active"])
def test_concurrent_fires_of_one_fingerprint_create_one_task(
    db: Conn, concurrently: harness.Concurrently, policy: str
) -> None:
    agent(db, "agent-1")
    routine(db, policy=policy)
    results = harness.values(concurrently([firing()] * N))
    statuses = Counter(r["status"] for r in results)
    gated = "skipped" if policy == "skip_if_active" else "coalesced"
    assert statuses == {"task_created": 1, gated: N - 1}
    [winner] = [r for r in results if r["status"] == "task_created"]
    if gated == "coalesced":
        assert {r["coalesced_into_run_id"] for r in results if r is not winner} == {
            winner["routine_run_id"]
        }
    assert db.execute("SELECT count(*) FROM office.tasks").fetchone() == (1,)
    assert Counter(r["status"] for r in runs(db)) == statuses


def test_concurrent_fires_with_always_create_all_create(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-1")
    routine(db, policy="always_create")
    results = harness.values(concurrently([firing()] * N))
    assert Counter(r["status"] for r in results) == {"task_created": N}


def test_concurrent_fires_of_a_stale_gate_heal_it_once_and_create_one_task(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    # Every fire finds the same stale run (its task is COMPLETED): one closes
    # it, one creates the next task, the rest are skipped by that task.
    agent(db, "agent-1")
    routine(db)
    first = fire(db)
    move(db, first["linked_task_id"], "COMPLETED")
    make_stale(db, first["routine_run_id"])
    closes = _count_closes(db)
    results = harness.values(concurrently([firing()] * N))
    assert Counter(r["status"] for r in results) == {"task_created": 1, "skipped": N - 1}
    assert run(db, first["routine_run_id"])["status"] == "done"
    assert closes() == 1


def _count_closes(db: Conn) -> Callable[[], int]:
    """Log every transition out of task_created (a test trigger); returns a
    reader of the number logged since."""
    db.execute(
        """
        CREATE TABLE public.close_log (run_id text, status text);
        CREATE FUNCTION public.log_close() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.close_log VALUES (NEW.id, NEW.status);
            RETURN NULL;
        END $$;
        CREATE TRIGGER log_close AFTER UPDATE ON office.routine_runs FOR EACH ROW
            WHEN (OLD.status = 'task_created' AND NEW.status <> 'task_created')
            EXECUTE FUNCTION public.log_close();
        """
    )

    def read() -> int:
        row = db.execute("SELECT count(*) FROM public.close_log").fetchone()
        assert row is not None
        return int(row[0])

    return read


def test_the_sync_and_inline_self_heals_close_a_run_once(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    # The task is terminal but its run is still task_created (its close was
    # missed); now half the callers sync it (the trigger's path) or close it
    # directly, the other half fire the routine (the gate's self-heal).
    agent(db, "agent-1")
    routine(db)
    first = fire(db)
    task_id, run_id = first["linked_task_id"], first["routine_run_id"]
    move(db, task_id, "COMPLETED")
    make_stale(db, run_id)
    closes = _count_closes(db)

    def sync(conn: Conn) -> Any:
        row = conn.execute(
            "SELECT office.sync_routine_run_status(%s, 'done')", [task_id]
        ).fetchone()
        return ("sync", row[0] if row else None)

    def close(conn: Conn) -> Any:
        row = conn.execute("SELECT office.close_routine_run(%s, 'cancelled')", [run_id]).fetchone()
        return ("close", row[0] if row else None)

    def heal(conn: Conn) -> Any:
        return ("fire", fire(conn)["status"])

    results = harness.values(concurrently([sync, close, heal, sync, close, heal, sync, heal]))
    assert closes() == 1
    closed = run(db, run_id)
    assert closed["status"] in ("done", "cancelled") and closed["completed_at"] is not None
    direct = [value for kind, value in results if kind in ("sync", "close")]
    # At most one direct call reports the close (none when a fire healed it).
    assert direct.count(True) <= 1
    fires = Counter(value for kind, value in results if kind == "fire")
    assert fires == {"task_created": 1, "skipped": 2}


def test_concurrent_tick_claimers_have_one_winner(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={})
    tick = datetime(2026, 5, 10, 12, tzinfo=UTC)
    db.execute(
        "SELECT office.add_routine_trigger('L', '0 12 * * *', 'UTC', %s, 't1')",
        [tick],
    )

    def claim(conn: Conn) -> bool:
        row = conn.execute(
            "SELECT office.claim_routine_tick('t1', %s, %s)", [tick, tick + timedelta(days=1)]
        ).fetchone()
        assert row is not None
        return bool(row[0])

    assert sorted(harness.values(concurrently([claim] * N))) == [False] * (N - 1) + [True]
    row = db.execute("SELECT next_run_at FROM office.routine_triggers WHERE id = 't1'").fetchone()
    assert row == (tick + timedelta(days=1),)


def test_concurrent_redeliveries_of_one_tick_make_one_wakeup(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={}, policy="always_create")
    tick = datetime(2026, 5, 10, 12, tzinfo=UTC)
    db.execute("SELECT office.add_routine_trigger('L', '0 12 * * *', 'UTC', %s, 't1')", [tick])

    def deliver(conn: Conn) -> dict[str, Any]:
        return fire(conn, "L", "cron", trigger_id="t1", claimed_tick=tick)

    results = harness.values(concurrently([deliver] * N))
    assert Counter(r["wakeup_outcome"] for r in results) == {"queued": 1, "deduped": N - 1}
    assert {r["status"] for r in results} == {"done"}
    assert len({r["wakeup_request_id"] for r in results}) == 1
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (1,)
    stats = db.execute("SELECT queue, kind, total FROM office.dedup_stats").fetchall()
    assert stats == [("wakeup", "durable", N - 1)]


def test_concurrent_wakeup_dispatches_for_one_agent_make_one_run(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-1")
    ids = []
    for n in range(N):
        row = db.execute(
            "SELECT wakeup_request_id FROM office.request_wakeup('agent-1', 'user', '', %s::jsonb)",
            [json.dumps({f"k{n}": n})],
        ).fetchone()
        assert row is not None
        ids.append(row[0])

    def dispatcher(request_id: str) -> Callable[[Conn], str]:
        def call(conn: Conn) -> str:
            row = conn.execute(
                "SELECT status FROM office.dispatch_wakeup(%s)", [request_id]
            ).fetchone()
            assert row is not None
            return str(row[0])

        return call

    results = harness.values(concurrently([dispatcher(i) for i in ids]))
    assert Counter(results) == {"claimed": 1, "coalesced": N - 1}
    row = db.execute("SELECT coalesced_count, context_snapshot FROM office.runs").fetchone()
    assert row is not None
    assert row[0] == N and row[1] == {f"k{n}": n for n in range(N)}


# --- isolation-spec control ---------------------------------------------------------------


def test_the_gate_spec_fails_without_the_lock(tmp_path: Path) -> None:
    # The control: routines_gate_race_nolock.spec is the same race with the
    # lock taken out of dispatch_routine, and its expected output is two
    # tasks. Run it against the locked race's expectation: it must not pass.
    expected = tmp_path / "expected"
    shutil.copytree(harness.ISOLATION_DIR / "expected", expected)
    locked = (expected / "routines_gate_race.out").read_text()
    header, first, *_rest = locked.split("\n\nstarting permutation")
    (expected / "routines_gate_race_nolock.out").write_text(
        f"{header}\n\nstarting permutation{first}\n"
    )
    result = harness.run_isolation_spec("routines_gate_race_nolock", expected_dir=expected)
    assert not result.passed
    assert "+task_created" in result.diffs  # the second fire created a second task
    assert "<waiting ...>" in locked and "-step s2_fire: <... completed>" in result.diffs
