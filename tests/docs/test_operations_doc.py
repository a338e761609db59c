"""The pg_cron example of ``docs/operations.md`` works as written.

A throwaway PostgreSQL 15 cluster (run as the ``postgres`` OS user, data on
/dev/shm, a free port) gets the documented ``postgresql.conf`` lines, office,
and the documented SQL, run verbatim with psql. Then: the jobs are registered
as the documented role, each job's command does its work when run once as
that role, and pg_cron itself runs the sweep (its smallest interval is one
minute, so the wait is up to about a minute)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from controlplane import schema
from tests import harness

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_CRON = Path("/usr/lib/postgresql/15/lib/pg_cron.so")
PSQL = shutil.which("psql") or str(PG_BIN / "psql")

pytestmark = pytest.mark.skipif(
    harness.LABEL == "pg18",
    reason="starts its own PostgreSQL 15 cluster: runs once, in the PostgreSQL 15 pass",
)


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", OPERATIONS, re.M | re.S)
    assert match, f"docs/operations.md has no section {title!r}"
    return match.group(1)


CRON = _section("Running the sweeps from pg_cron")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", CRON, re.M | re.S)
CONF = [body for lang, body in BLOCKS if lang == "conf"]
SQL = [body for lang, body in BLOCKS if lang == "sql"]
PREPARE = next(body for body in SQL if "CREATE EXTENSION IF NOT EXISTS pg_cron" in body)
SETUP = next(body for body in SQL if "cron.schedule(" in body)
INSPECT = next(body for body in SQL if "cron.job_run_details" in body)
JOB_NAMES = re.findall(r"cron\.schedule\('([^']+)'", SETUP)
JOB_ROLE = re.search(r"^SET ROLE (\w+);", SETUP, re.M).group(1)  # type: ignore[union-attr]
DATABASE = re.search(r"^cron\.database_name = '(\w+)'", CONF[0], re.M).group(1)  # type: ignore[union-attr]
SWEEP_JOB = "office-sweep-stuck-parents"


@pytest.fixture(scope="module")
def cron_cluster() -> Iterator[str]:
    """A PostgreSQL 15 cluster started with the documented conf lines; yields
    the URL of its office database (office installed, pg_cron not yet)."""
    assert PG_CRON.is_file(), "pg_cron is not installed: `make deps` installs postgresql-15-cron"
    cluster = harness.Cluster(PG_BIN)
    try:
        with (cluster.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# docs/operations.md\n" + "".join(CONF))
        cluster.start()
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(cluster.url(DATABASE), autocommit=True) as conn:
            conn.execute(schema.plain_sql(schema.install_script()).encode())
        yield cluster.url(DATABASE)
    finally:
        cluster.destroy()


def _psql(url: str, script: str) -> str:
    result = subprocess.run(
        [PSQL, url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _stuck_parent(conn: psycopg.Connection[Any], parent: str) -> None:
    """A parent whose children finished while it had no assignee, then assigned:
    no edge delivered its wake, only a sweep will."""
    conn.execute("SELECT office.create_task('w1', %s, 'epic')", (parent,))
    conn.execute(
        "SELECT office.create_task('w1', %s, 'story', parent_id => %s)", (f"{parent}-child", parent)
    )
    conn.execute("SELECT office.move_task(%s, 'COMPLETED')", (f"{parent}-child",))
    conn.execute("SELECT office.assign_task(%s, 'a1')", (parent,))


def _stuck(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute("SELECT parent_task_id FROM office.list_stuck_parents(100)")]


def test_the_documented_blocks_are_the_ones_this_test_runs() -> None:
    assert len(CONF) == 1 and "shared_preload_libraries = 'pg_cron'" in CONF[0]
    assert JOB_NAMES == [SWEEP_JOB, "office-recover-stale-runs", "office-prune"]
    assert "officectl run --disable sweep --disable recovery --disable prune" in CRON


def test_the_pg_cron_example_as_written(cron_cluster: str) -> None:
    with psycopg.connect(cron_cluster, autocommit=True) as conn:
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        _stuck_parent(conn, "p-direct")
        # A run claimed an hour ago by a worker that died, and one finished long ago.
        conn.execute("SELECT office.enqueue_run('a1', 'heartbeat', idempotency_key => 'stale')")
        conn.execute("SELECT office.enqueue_run('a1', 'digest', idempotency_key => 'old')")
        conn.execute(
            "UPDATE office.runs SET status = 'claimed', claimed_by = 'w-dead', attempt = 1,"
            " claimed_at = now() - interval '1 hour' WHERE idempotency_key = 'stale'"
        )
        conn.execute(
            "UPDATE office.runs SET status = 'finished', finished_at = now() - interval '30 days'"
            " WHERE idempotency_key = 'old'"
        )
        assert _stuck(conn) == ["p-direct"]

        # The documented SQL, verbatim, as a superuser in the office database.
        _psql(cron_cluster, PREPARE)
        _psql(cron_cluster, SETUP)
        _psql(cron_cluster, SETUP)  # re-running it is harmless

        jobs = conn.execute(
            "SELECT jobname, username, database, command FROM cron.job ORDER BY jobid"
        ).fetchall()
        assert [j[0] for j in jobs] == JOB_NAMES
        assert {(j[1], j[2]) for j in jobs} == {(JOB_ROLE, DATABASE)}

        # Each job's command once, as the job's role: each does its work.
        for _name, role, _database, command in jobs:
            with conn.transaction():
                conn.execute(f"SET LOCAL ROLE {role}")
                conn.execute(command)
        assert _stuck(conn) == []
        receipt = conn.execute(
            "SELECT delivery_operation_id FROM office.parent_child_wake_receipts"
            " WHERE parent_task_id = 'p-direct'"
        ).fetchone()
        assert receipt is not None and receipt[0].startswith("task_children_completed:p-direct:")
        statuses: dict[str, str] = dict(
            conn.execute(
                "SELECT idempotency_key, status FROM office.runs WHERE idempotency_key"
                " IN ('stale', 'old')"
            ).fetchall()
        )
        assert statuses == {"stale": "queued"}  # recovered; the old one pruned

        # pg_cron runs the sweep by itself (the next minute boundary).
        _stuck_parent(conn, "p-cron")
        assert _stuck(conn) == ["p-cron"]
        deadline = time.monotonic() + 100
        succeeded = None
        while time.monotonic() < deadline:
            succeeded = conn.execute(
                "SELECT d.status, d.return_message FROM cron.job_run_details d"
                " JOIN cron.job j USING (jobid) WHERE j.jobname = %s AND d.status <> 'running'"
                " ORDER BY d.runid DESC LIMIT 1",
                (SWEEP_JOB,),
            ).fetchone()
            if succeeded is not None:
                break
            time.sleep(1)
        assert succeeded is not None, "pg_cron did not run the sweep within 100 s"
        assert succeeded[0] == "succeeded", succeeded
        assert _stuck(conn) == []
        runs = conn.execute(
            "SELECT count(*) FROM office.runs"
            " WHERE reason = 'task_children_completed' AND task_id = 'p-cron'"
        ).fetchone()
        assert runs == (1,)

    # The documented inspection queries run and show the jobs and their runs.
    shown = _psql(cron_cluster, INSPECT)
    assert all(name in shown for name in JOB_NAMES) and "succeeded" in shown
