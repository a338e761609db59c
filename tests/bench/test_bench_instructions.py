"""bench/instructions.py's cases do what their names say, run here as the
bench runs them (its set-up, then PREPARE and EXECUTEs), without callgrind:
each floor writes its rows, enqueue_run queues fresh keys and dedups a
repeated one, each cycle claims and finishes, enqueue_runs queues 1,000."""

from __future__ import annotations

from typing import Any

import psycopg

from bench import hotpath, instructions
from bench.instructions import Case

CALLS = 3


def _run(db: psycopg.Connection[Any], case: Case) -> None:
    db.execute(case.prepare)
    for i in range(CALLS):
        db.execute(case.call.format(b="t", i=i, a=i % hotpath.AGENTS))
    db.execute("DEALLOCATE c")


def _count(db: psycopg.Connection[Any], query: str) -> int:
    row = db.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_each_case_does_what_its_name_says(db: psycopg.Connection[Any]) -> None:
    db.prepare_threshold = None  # the cases' own PREPARE only
    assert instructions.SETUP[0] == "CREATE EXTENSION office"  # (the test database has it)
    for statement in instructions.SETUP[1:]:
        db.execute(statement)
    queued = _count(db, "SELECT count(*) FROM office.runs WHERE status = 'queued'")
    assert queued == hotpath.QUEUED

    _run(db, instructions.FLOOR)
    assert _count(db, "SELECT count(*) FROM public.bench_floor WHERE k LIKE 'f-t-%'") == CALLS
    _run(db, instructions.FRESH)
    assert (
        _count(db, "SELECT count(*) FROM office.runs WHERE idempotency_key LIKE 'k-t-%'") == CALLS
    )
    _run(db, instructions.REPEATED)
    assert _count(db, "SELECT count(*) FROM office.runs WHERE idempotency_key = 'k-t'") == 1
    assert _count(db, "SELECT total FROM office.dedup_stats WHERE kind = 'windowed'") == CALLS - 1

    _run(db, instructions.RAW_CYCLE)
    assert _count(db, "SELECT count(*) FROM public.bench_queue WHERE status = 'finished'") == CALLS
    _run(db, instructions.CYCLE)
    assert _count(db, "SELECT count(*) FROM office.runs WHERE status = 'finished'") == CALLS

    _run(db, instructions.SET_FLOOR)
    assert (
        _count(db, "SELECT count(*) FROM public.bench_floor WHERE k LIKE 's-t-%'") == 1000 * CALLS
    )
    _run(db, instructions.BULK)
    assert (
        _count(db, "SELECT count(*) FROM office.runs WHERE idempotency_key LIKE 'b-t-%'")
        == 1000 * CALLS
    )
