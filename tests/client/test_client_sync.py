"""The psycopg client, :class:`controlplane.client.Office`, held to the
scenarios of ``tests/scenarios/clients.py`` (as the asyncpg one is, in
``test_client_async.py``), plus what only it has: a borrowed pool."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.client import Office
from controlplane.models import QueueOutcome
from tests.scenarios.clients import (
    SCENARIOS,
    Env,
    Scenario,
    check_raw_session_state_does_not_outlive_the_call,
)


@pytest.fixture
def env(dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture) -> Iterator[Env]:
    registry = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="controlplane")
    with Office(dsn, min_size=1, max_size=4, registry=registry) as office:
        yield Env(office, registry, db, caplog)


@pytest.mark.parametrize("check", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_office(check: Scenario, env: Env) -> None:
    check(env)


def test_a_borrowed_pool_is_left_open(dsn: str) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:  # not autocommit
        with Office(pool=pool, registry=CollectorRegistry()) as office:
            office.upsert_agent("a1", "w1")
            assert office.enqueue_run("a1", "r").outcome is QueueOutcome.QUEUED
            # Nothing is left uncommitted: a second client sees the run.
            with Office(dsn, registry=CollectorRegistry()) as other:
                assert other.claim_run() is not None
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_client_needs_a_dsn_or_a_pool() -> None:
    with pytest.raises(ValueError, match="either a dsn or a pool"):
        Office()


def test_raw_session_state_does_not_outlive_the_call(dsn: str) -> None:
    with Office(dsn, min_size=1, max_size=1, registry=CollectorRegistry()) as office:
        check_raw_session_state_does_not_outlive_the_call(office)
