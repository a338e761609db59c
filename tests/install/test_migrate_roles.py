"""``officectl migrate`` by a database owner without CREATEROLE, on a
throwaway cluster (the office roles are cluster-wide, and the suite's
cluster has them): with the roles missing it is refused up front with one
line saying what to run; with them pre-created as docs/operations.md says it
installs, with no CREATEROLE; and it prints no stray result tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from controlplane import migrate, schema
from tests import harness

OFFICECTL = str(Path(sys.executable).with_name("officectl"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[harness.Cluster]:
    with harness.throwaway_cluster() as cluster:
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute("CREATE ROLE owner_no_createrole LOGIN")
            admin.execute("CREATE DATABASE owned OWNER owner_no_createrole")
        yield cluster


def _migrate(url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OFFICE_DSN"}
    return subprocess.run(
        [OFFICECTL, "--dsn", url, "migrate"], capture_output=True, text=True, env=env, timeout=300
    )


def test_an_owner_without_createrole_is_told_what_to_do_then_installs(
    cluster: harness.Cluster,
) -> None:
    owner = f"postgresql://owner_no_createrole@127.0.0.1:{cluster.port}/owned"
    refused = _migrate(owner)
    assert refused.returncode == 1, refused
    assert "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("Error: role owner_no_createrole may not create roles"), line
    assert "office_producer, office_worker, office_reader, office_admin are missing" in line
    assert migrate.PRECREATE_ROLES in line and "ALTER ROLE owner_no_createrole CREATEROLE" in line
    assert line.endswith("(SQLSTATE 42501)")
    with psycopg.connect(owner) as conn:
        assert conn.execute("SELECT to_regnamespace('office')").fetchone() == (None,)

    # Created but not granted to office_admin: refused too (the GRANT would fail).
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        for role in migrate.ROLES:
            admin.execute(f"CREATE ROLE {role} NOLOGIN")
    half = _migrate(owner)
    assert half.returncode == 1 and "office_admin is not a member" in half.stderr

    # As docs/operations.md says: the four roles, then the owner installs.
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute("GRANT office_producer, office_worker, office_reader TO office_admin")
    done = _migrate(owner)
    assert done.returncode == 0, done.stderr
    assert "set_config" not in done.stdout
    assert done.stdout.strip().startswith(f"office {schema.current_version()} via migrations:")
    with psycopg.connect(owner) as conn:
        row = conn.execute(
            "SELECT office.schema_version(), rolcreaterole FROM pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
        assert row == (schema.current_version(), False)
    again = _migrate(owner)
    assert again.returncode == 0 and "nothing to apply" in again.stdout


def test_migrate_prints_no_result_tables(cluster: harness.Cluster) -> None:
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE plain")
    done = _migrate(cluster.url("plain"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[0].startswith("office ")
    assert "set_config" not in done.stdout and "(1 row)" not in done.stdout
