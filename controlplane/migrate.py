"""The plain-SQL install path: yoyo migrations for databases where
``CREATE EXTENSION`` is not possible (managed PostgreSQL).

The migrations are derived from the scripts themselves (:func:`migrations`):
the oldest released version's install script, then one upgrade step per later
version, through :func:`version_step` and :func:`upgrade_step`, so both
install paths run the very same SQL and a new version needs no migration file.
A migration's id, ``000N.office-V`` (N counting versions from 0.1.0), is what
yoyo records in a database, so it never changes. A database that already has the extension is moved
forward with ``ALTER EXTENSION office UPDATE`` instead: mixing the two paths
in one database would leave objects that belong to neither.

Nothing here resolves a name through the caller's ``search_path``, which in a
database someone else controls may put ``public`` (and whatever was planted
there) before ``pg_catalog`` (docs/architecture.md, principle 8): each step pins
``pg_catalog, pg_temp`` for its own transaction, the probe of the installed
extension runs pinned, and yoyo's bookkeeping runs with only the schema of its
tables on the path, so that ``pg_catalog`` is searched first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import parse_uri
from yoyo.migrations import Migration, MigrationList, StepCollector, default_migration_table

from controlplane import schema
from controlplane.errors import OfficeError

# Transaction-local (SET LOCAL): yoyo runs every migration in a transaction, so
# the caller's setting is back once the step commits or rolls back. The frozen
# 0.1.0-0.3.0 scripts do not pin it themselves, and their SQL-standard bodies,
# views, defaults and constraints bind their names when they are created. A
# SET, not a SELECT of set_config: yoyo prints the rows of a step's first
# statement, and `officectl migrate` would print a set_config table per step.
PIN_SEARCH_PATH = "SET LOCAL search_path = pg_catalog, pg_temp;\n"


def pinned(script: str) -> str:
    """``script`` made to run with ``search_path`` pinned to ``pg_catalog, pg_temp``."""
    return PIN_SEARCH_PATH + script


def version_step(version: str) -> tuple[str, str]:
    """The apply and rollback SQL of a yoyo step that installs ``version`` from nothing."""
    return (
        pinned(schema.plain_sql(schema.install_script(version))),
        pinned("DROP SCHEMA office CASCADE"),
    )


def upgrade_step(source: str, target: str) -> tuple[str, None]:
    """The apply SQL of a yoyo step that upgrades ``source`` to ``target`` (no rollback)."""
    return (pinned(schema.plain_sql(schema.upgrade_script(source, target))), None)


def migration_id(index: int, version: str) -> str:
    """The id yoyo records for the migration to ``version``, the ``index``-th
    version (1 for the first)."""
    return f"{index:04d}.{schema.EXTENSION}-{version}"


class _DerivedMigration(Migration):  # type: ignore[misc]
    """A yoyo migration of one step whose SQL is given, not read from a file
    (yoyo's own ``Migration`` imports a module per migration)."""

    def __init__(
        self, id: str, apply: str, rollback: str | None, after: _DerivedMigration | None
    ) -> None:
        super().__init__(id, f"<{id}>", str(schema.sql_dir()))
        self._apply = apply
        self._rollback = rollback
        self._after = after

    def load(self) -> None:
        if self.loaded:
            return
        collector = StepCollector(migration=self)
        collector.add_step(self._apply, self._rollback)
        self._depends = set() if self._after is None else {self._after}
        self.use_transactions = True
        self.steps = collector.create_steps(True)


def migrations() -> Any:
    """The yoyo migrations, oldest first: installing the oldest released
    version, then each upgrade step to the next version up to the current
    one. A version with no step into it from the one before is an error
    naming both."""
    versions = schema.versions()
    steps = set(schema.upgrade_steps())
    chain: list[_DerivedMigration] = []
    for index, version in enumerate(versions, start=1):
        rollback: str | None
        if not chain:
            apply, rollback = version_step(version)
        else:
            source = versions[index - 2]
            if (source, version) not in steps:
                raise LookupError(f"no upgrade step from office {source} to {version}")
            apply, rollback = upgrade_step(source, version)
        previous = chain[-1] if chain else None
        chain.append(_DerivedMigration(migration_id(index, version), apply, rollback, previous))
    return MigrationList(chain)


def yoyo_url(dsn: str) -> str:
    """yoyo needs the ``postgresql+psycopg`` scheme (plain ``postgresql`` means psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix) :]
    if dsn.startswith("postgresql+psycopg://"):
        return dsn
    raise ValueError(f"not a postgresql:// URL: {dsn!r} (yoyo takes URLs, not key=value DSNs)")


class _Backend(PostgresqlPsycopgBackend):  # type: ignore[misc]
    """yoyo's psycopg backend, listing its tables without a resolvable operator.

    Its own query compares ``information_schema.tables.table_schema`` (a
    domain) with a parameter; no operator in ``pg_catalog`` takes that domain
    exactly, so one planted for it on the path would be chosen even after
    ``pg_catalog``. Everything else yoyo runs matches ``pg_catalog`` exactly.
    """

    def list_tables(self, **kwargs: Any) -> list[str]:
        cursor = self.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
            " WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()"
        )
        return [str(row[0]) for row in cursor.fetchall()]


def _backend(url: str, bookkeeping_schema: str) -> Any:
    """A yoyo backend whose connections (bookkeeping and steps alike) have only
    ``bookkeeping_schema`` on ``search_path``, through yoyo's own ``schema``
    URL parameter (it issues ``SET search_path TO`` its value)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    query.append(("schema", bookkeeping_schema))
    backend = _Backend(
        parse_uri(urlunsplit(parts._replace(query=urlencode(query)))), default_migration_table
    )
    backend.init_database()
    return backend


def _pin(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)")


#: The cluster-wide roles the install creates unless they exist (00_schema.sql).
ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")

#: What a role without CREATEROLE needs done for it first, by one that has it
#: (docs/operations.md, "Roles").
PRECREATE_ROLES = (
    "CREATE ROLE office_producer NOLOGIN; CREATE ROLE office_worker NOLOGIN;"
    " CREATE ROLE office_reader NOLOGIN; CREATE ROLE office_admin NOLOGIN;"
    " GRANT office_producer, office_worker, office_reader TO office_admin;"
)


class RolesMissing(OfficeError):
    """The installing role cannot create (or grant) the office roles; the
    message says what to run first."""

    sqlstate = "42501"


def check_roles(conn: psycopg.Connection[Any]) -> None:
    """Refuse, with what to do, an install that would fail on CREATE ROLE or
    GRANT: the office roles are missing (or office_admin is not a member of
    the other three) and the installing role may not create roles. With the
    roles there, the install needs no CREATEROLE."""
    row = conn.execute(
        "SELECT r.rolsuper OR r.rolcreaterole FROM pg_catalog.pg_roles r"
        " WHERE r.rolname OPERATOR(pg_catalog.=) pg_catalog.current_user()"
    ).fetchone()
    if row is None or row[0]:
        return
    present = {
        str(r[0])
        for r in conn.execute(
            "SELECT rolname FROM pg_catalog.pg_roles"
            " WHERE rolname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])",
            [list(ROLES)],
        )
    }
    missing = [r for r in ROLES if r not in present]
    user = conn.info.user
    if missing:
        what = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
    else:
        granted = conn.execute(
            "SELECT pg_catalog.bool_and(pg_catalog.pg_has_role('office_admin', r, 'MEMBER'))"
            " FROM pg_catalog.unnest(%s::pg_catalog.text[]) AS r",
            [list(ROLES[:3])],
        ).fetchone()
        if granted is not None and granted[0]:
            return
        what = "office_admin is not a member of office_producer, office_worker, office_reader"
    raise RolesMissing(
        f"role {user} may not create roles and office needs its four roles ({what}):"
        f" have a role with CREATEROLE run {PRECREATE_ROLES!r} (docs/operations.md, Roles),"
        f" or ALTER ROLE {user} CREATEROLE, then run officectl migrate again"
    )


@dataclass(frozen=True)
class MigrateResult:
    path: str  # "extension" or "migrations"
    applied: list[str]
    version: str


def migrate(dsn: str, target: str | None = None) -> MigrateResult:
    """Bring the database at ``dsn`` to the current schema (or to migration
    ``target``, e.g. ``0001.office-0.1.0``, for testing old versions)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Where yoyo has always kept its tables (the caller's current schema,
        # public unless the path says otherwise): read before pinning.
        current = conn.execute("SELECT current_schema").fetchone()
        bookkeeping_schema = (
            sql.Identifier(str(current[0])).as_string(conn) if current and current[0] else None
        )
        _pin(conn)
        row = conn.execute(
            "SELECT extversion FROM pg_catalog.pg_extension"
            " WHERE extname OPERATOR(pg_catalog.=) 'office'"
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

        check_roles(conn)

    if bookkeeping_schema is None:
        raise ValueError("no schema on search_path exists to keep yoyo's tables in")
    backend = _backend(yoyo_url(dsn), bookkeeping_schema)
    derived = migrations()
    with backend.lock():
        pending = backend.to_apply(derived)
        if target is not None:
            ids = [m.id for m in derived]
            if target not in ids:
                raise ValueError(f"unknown migration {target!r}; known: {', '.join(ids)}")
            allowed = set(ids[: ids.index(target) + 1])
            pending = pending.filter(lambda m: m.id in allowed)
        applied = [m.id for m in pending]
        backend.apply_migrations(pending)
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT office.schema_version()").fetchone()
    return MigrateResult("migrations", applied, str(found[0]) if found else "")
