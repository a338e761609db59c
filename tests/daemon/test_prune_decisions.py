"""The prune loop deletes old wake decisions (docs/api.md §9) with the runs
and events, and the clients' ``prune_wake_decisions`` answers 0 on a schema
that has none."""

from __future__ import annotations

from typing import Any

import psycopg

from controlplane.client import Office
from tests.harness import wait_for
from tests.scenarios.daemon import daemon


def _decision(db: psycopg.Connection[Any], days_ago: int) -> None:
    db.execute(
        "INSERT INTO office.wake_decisions (at, agent_profile_id, decision, origin)"
        " VALUES (now() - make_interval(days => %s), 'a1', 'guarded', 'agent')",
        (days_ago,),
    )


def _decisions(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM office.wake_decisions").fetchone()
    assert row is not None
    return int(row[0])


def test_the_client_prunes_decisions_older_than_the_limit(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    for days in (30, 10, 1):
        _decision(db, days)
    with Office(dsn) as office:
        assert office.prune_wake_decisions(7 * 86400) == 2
        assert office.prune_wake_decisions(7 * 86400) == 0
    assert _decisions(db) == 1


def test_without_the_function_the_client_prunes_nothing(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    db.execute("ALTER EXTENSION office DROP FUNCTION office.prune_wake_decisions(interval)")
    db.execute("DROP FUNCTION office.prune_wake_decisions(interval)")
    with Office(dsn) as office:
        assert office.prune_wake_decisions(60) == 0


def test_the_daemons_prune_loop_deletes_old_decisions(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    _decision(db, 30)
    _decision(db, 1)
    others = [
        arg
        for loop in ("subscriber", "wakeups", "cron", "sweep", "recovery")
        for arg in ("--disable", loop)
    ]
    with daemon(dsn, *others) as run:
        wait_for(lambda: _decisions(db) == 1, "the prune loop")
        assert run.terminate() == 0, run.text()[-4000:]
