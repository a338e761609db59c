"""The plain-SQL install path: yoyo migrations for databases where
``CREATE EXTENSION`` is not possible (managed PostgreSQL).

Each migration in ``migrations/`` applies one script of ``controlplane.schema``
through :func:`version_step` or :func:`upgrade_step`, so both install paths
run the very same SQL. A database that already has the extension is moved
forward with ``ALTER EXTENSION office UPDATE`` instead: mixing the two paths
in one database would leave objects that belong to neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from yoyo import get_backend, read_migrations, step

from controlplane import schema


def version_step(version: str) -> Any:
    """A yoyo step that installs ``version`` from nothing."""
    return step(schema.plain_sql(schema.install_script(version)), "DROP SCHEMA office CASCADE")


def upgrade_step(source: str, target: str) -> Any:
    """A yoyo step that upgrades ``source`` to ``target``."""
    return step(schema.plain_sql(schema.upgrade_script(source, target)))


def yoyo_url(dsn: str) -> str:
    """yoyo needs the ``postgresql+psycopg`` scheme (plain ``postgresql`` means psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix) :]
    if dsn.startswith("postgresql+psycopg://"):
        return dsn
    raise ValueError(f"not a postgresql:// URL: {dsn!r} (yoyo takes URLs, not key=value DSNs)")


@dataclass(frozen=True)
class MigrateResult:
    path: str  # "extension" or "migrations"
    applied: list[str]
    version: str


def migrate(dsn: str, target: str | None = None) -> MigrateResult:
    """Bring the database at ``dsn`` to the current schema (or to migration
    ``target``, e.g. ``0001.office-0.1.0``, for testing old versions)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'office'"
        ).fetchone()
        if row is not None:
            if target is not None:
                raise ValueError(
                    "office is installed as an extension; --target applies to migrations"
                )
            before = row[0]
            conn.execute("ALTER EXTENSION office UPDATE")
            after = conn.execute("SELECT office.schema_version()").fetchone()
            version = str(after[0]) if after else before
            return MigrateResult("extension", [] if version == before else [version], version)

    backend = get_backend(yoyo_url(dsn))
    migrations = read_migrations(str(schema.migrations_dir()))
    with backend.lock():
        pending = backend.to_apply(migrations)
        if target is not None:
            ids = [m.id for m in migrations]
            if target not in ids:
                raise ValueError(f"unknown migration {target!r}; known: {', '.join(ids)}")
            allowed = set(ids[: ids.index(target) + 1])
            pending = pending.filter(lambda m: m.id in allowed)
        applied = [m.id for m in pending]
        backend.apply_migrations(pending)
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT office.schema_version()").fetchone()
    return MigrateResult("migrations", applied, str(found[0]) if found else "")
