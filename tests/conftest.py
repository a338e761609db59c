"""Fixtures for every test: a fresh, committed database per test, cloned from
a template that has ``CREATE EXTENSION office`` (pytest-postgresql, noproc),
against the cluster that ``tests/run_suite.sh`` started
(``OFFICE_TEST_HOST``/``PORT``/``USER``); with ``OFFICE_TEST_DEFINITIONS=plpgsql``
the template's native functions are bound back to PL/pgSQL
(:func:`tests.harness.create_office`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import sql
from pytest_postgresql import factories

from controlplane import schema
from tests import harness

pytest_plugins = ["tests.tiers"]


@pytest.fixture(scope="session", autouse=True)
def _extension_files() -> None:
    """Write the current extension files into the server's share directory when
    the run names one (``OFFICE_TEST_EXTENSION_DIR``, for development), so every
    ``CREATE EXTENSION office`` gets the SQL of this checkout. ``make test``
    installs them with PGXS (PostgreSQL 15) and ``officectl db start``
    (the embedded PostgreSQL 18) instead."""
    target = os.environ.get("OFFICE_TEST_EXTENSION_DIR")
    if target:
        schema.install_extension_files(Path(target))


def _load_office(**kwargs: Any) -> None:
    with psycopg.connect(
        host=kwargs["host"],
        port=kwargs["port"],
        user=kwargs["user"],
        dbname=kwargs["dbname"],
        autocommit=True,
    ) as conn:
        harness.create_office(conn)


# One database name per process, so parallel pytest runs on one cluster never collide.
_DBNAME = f"office_{harness.LABEL}_{os.getpid()}"

office_template = factories.postgresql_noproc(
    host=harness.HOST, port=harness.PORT, user=harness.USER, dbname=_DBNAME, load=[_load_office]
)
office_database = factories.postgresql("office_template")


@pytest.fixture
def dsn(office_database: psycopg.Connection[Any]) -> str:
    """URL of this test's fresh database (office installed, nothing else)."""
    return harness.conninfo(office_database.info.dbname)


@pytest.fixture
def db(office_database: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A psycopg connection to this test's fresh database, autocommit on."""
    office_database.autocommit = True
    return office_database


@pytest.fixture
async def async_db(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """An asyncpg connection to the same database as ``db``."""
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def concurrently(dsn: str) -> harness.Concurrently:
    """``concurrently([f, g, ...])`` runs each callable on its own connection to
    this test's database, all released at once; returns their outcomes."""

    def run(callables: Sequence[Callable[[psycopg.Connection[Any]], Any]]) -> list[harness.Outcome]:
        return harness.run_concurrently(dsn, callables)

    return run


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database without office (from template0), dropped afterwards; yields its URL."""
    name = f"office_empty_{harness.LABEL}_{os.getpid()}"
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield harness.conninfo(name)
    finally:
        with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
