"""bench/pgbench_enqueue.py's cases do what their names say: the floor fills
its table, the runs-row cases insert queued runs (with and without the
readiness trigger, which is enabled again afterwards), and enqueue_run queues
runs through the function."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bench import pgbench_enqueue


def _counts(dsn: str) -> tuple[int, int, int, str]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM public.bench_floor),"
            " (SELECT count(*) FROM office.runs WHERE status = 'queued'),"
            " (SELECT count(*) FROM office.agent_ready),"
            " (SELECT tgenabled FROM pg_trigger WHERE tgname = %s)",
            (pgbench_enqueue.TRIGGER,),
        ).fetchone()
    assert row is not None
    return row


@pytest.mark.parametrize("case", pgbench_enqueue.CASES, ids=lambda c: c.name)
def test_each_case_writes_what_it_names(
    dsn: str, tmp_path: Path, case: pgbench_enqueue.Case
) -> None:
    binary = pgbench_enqueue.default_pgbench()
    if binary is None:
        pytest.skip("no pgbench binary")
    tps = pgbench_enqueue.measure(binary, dsn, case, 1, 1, tmp_path)
    assert tps > 0
    floor, queued, ready, trigger = _counts(dsn)
    if case.name == "floor":
        assert floor > 0 and queued == 0
    else:
        assert floor == 0 and queued > 0
        # The trigger lists the agent unless the case disabled it.
        assert (ready == 0) == case.without_trigger
    assert trigger == "O"  # enabled again
