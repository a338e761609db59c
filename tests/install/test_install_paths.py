"""Both install paths give one schema: ``CREATE EXTENSION office`` (PGXS files)
and ``officectl migrate`` (yoyo, plain SQL), and a fresh install equals every
older release upgraded step by step."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from controlplane import schema
from controlplane.migrate import migrate, yoyo_url
from tests import catalog, harness

RELEASED = sorted(
    (
        p.stem.removeprefix("office--")
        for p in (schema.sql_dir() / "released").glob("office--*.sql")
    ),
    key=lambda v: tuple(int(x) for x in v.split(".")),
)


def test_yoyo_path_builds_the_same_catalog_as_the_extension(dsn: str, empty_database: str) -> None:
    result = migrate(empty_database)
    assert result.path == "migrations"
    assert result.version == schema.current_version()
    assert result.applied, "a fresh database must get every migration"

    diff = catalog.differences(catalog.snapshot(dsn), catalog.snapshot(empty_database))
    assert diff == [], "\n".join(diff)


def test_the_catalog_snapshot_sees_a_difference(dsn: str, empty_database: str) -> None:
    # The comparison above must be able to fail: one extra grant is a difference.
    migrate(empty_database)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION office.schema_version() TO PUBLIC")
    diff = catalog.differences(catalog.snapshot(dsn), catalog.snapshot(empty_database))
    assert any(line.startswith("functions:") for line in diff)


def test_migrate_twice_applies_nothing_the_second_time(empty_database: str) -> None:
    first = migrate(empty_database)
    second = migrate(empty_database)
    assert first.applied and second.applied == []
    assert second.version == schema.current_version()


def test_migrate_on_an_extension_database_updates_the_extension(dsn: str) -> None:
    result = migrate(dsn)
    assert result.path == "extension"
    assert result.applied == []
    assert result.version == schema.current_version()


def test_migrate_refuses_an_unknown_target(empty_database: str) -> None:
    with pytest.raises(ValueError, match="unknown migration 'nope'"):
        migrate(empty_database, target="nope")


@pytest.mark.parametrize("version", RELEASED)
def test_every_release_upgrades_to_the_fresh_catalog(
    version: str, dsn: str, empty_database: str
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION office VERSION {}").format(sql.Literal(version)))
        assert conn.execute("SELECT office.schema_version()").fetchone() == (version,)
        conn.execute("ALTER EXTENSION office UPDATE")
        assert conn.execute("SELECT office.schema_version()").fetchone() == (
            schema.current_version(),
        )
    diff = catalog.differences(catalog.snapshot(dsn), catalog.snapshot(empty_database))
    assert diff == [], "\n".join(diff)


def test_every_version_has_an_upgrade_path_to_the_current_one(db: psycopg.Connection[Any]) -> None:
    current = schema.current_version()
    rows = db.execute(
        "SELECT source, path FROM pg_extension_update_paths('office') WHERE target = %s", (current,)
    ).fetchall()
    paths = {source: path for source, path in rows}
    for version in RELEASED:
        assert paths.get(version), f"no upgrade path from {version} to {current}"


def test_schema_version_matches_the_control_file_and_the_extension(
    db: psycopg.Connection[Any],
) -> None:
    version = db.execute("SELECT office.schema_version()").fetchone()
    extversion = db.execute(
        "SELECT extversion FROM pg_extension WHERE extname = 'office'"
    ).fetchone()
    assert version == extversion == (schema.current_version(),)


def test_pgxs_builds_the_same_script_as_the_python_layer(tmp_path: Path) -> None:
    version = schema.current_version()
    subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(schema.sql_dir()),
            f"office--{version}.sql",
            "PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config",
        ],
        check=True,
        capture_output=True,
    )
    built = (schema.sql_dir() / f"office--{version}.sql").read_text()
    assert built == schema.install_script()


def test_plain_sql_removes_only_the_extension_only_lines() -> None:
    script = (
        '\\echo Use "CREATE EXTENSION office" to load this file. \\quit\n'
        "CREATE TABLE office.t (id int);\n"
        "SELECT pg_catalog.pg_extension_config_dump('office.t', '');\n"
        "SELECT 1;\n"
    )
    assert schema.plain_sql(script) == "\nCREATE TABLE office.t (id int);\n\nSELECT 1;\n"


def test_yoyo_url_converts_plain_postgresql_urls() -> None:
    assert yoyo_url("postgresql://u@h:5/d") == "postgresql+psycopg://u@h:5/d"
    assert yoyo_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    with pytest.raises(ValueError, match="not a postgresql:// URL"):
        yoyo_url("host=h dbname=d")


@pytest.fixture
def owner_database() -> Iterator[str]:
    """A database owned by a plain (non-superuser) login role."""
    role, name = f"office_owner_{harness.LABEL}", f"office_owned_{harness.LABEL}"
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(role)
            )
        )
    try:
        yield f"postgresql://{role}@{harness.HOST}:{harness.PORT}/{name}"
    finally:
        with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_database_owner_who_is_not_superuser_can_create_the_extension(
    owner_database: str,
) -> None:
    with psycopg.connect(owner_database, autocommit=True) as conn:
        assert conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False,)
        conn.execute("CREATE EXTENSION office")
        owner = conn.execute(
            "SELECT pg_get_userbyid(nspowner) = current_user"
            " FROM pg_namespace WHERE nspname = 'office'"
        ).fetchone()
        assert owner == (True,)
        assert conn.execute("SELECT office.schema_version()").fetchone() == (
            schema.current_version(),
        )
        # \dx shows office in its own schema (office.control names it) ...
        assert conn.execute(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'office'"
        ).fetchone() == ("office",)
        # ... which PostgreSQL created, so DROP EXTENSION leaves it behind,
        # empty and the owner's; installing again reuses it.
        conn.execute("DROP EXTENSION office")
        left = conn.execute(
            "SELECT pg_get_userbyid(nspowner) = current_user,"
            " (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid)"
            "  + (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid)"
            " FROM pg_namespace n WHERE nspname = 'office'"
        ).fetchone()
        assert left == (True, 0)
        conn.execute("CREATE EXTENSION office")
        conn.execute("DROP EXTENSION office")
        conn.execute("DROP SCHEMA office")
