"""``officectl doctor``: is this database's office installation sound?

Each check reads the catalog (nothing is changed) and yields findings: what
it saw and, for anything wrong, what to do about it. A ``problem`` makes the
command exit non-zero; a ``warning`` is worth knowing but does not.

Checks:

* version - ``office.schema_version()`` against this package's version
  (:func:`controlplane.schema.current_version`), and the extension's own
  version where office is an extension;
* indexes - the dedup and routine-gate indexes of API.md exist, are valid and
  have exactly the documented columns and predicates;
* roles and grants - the four office roles exist, ``office_admin`` is a member
  of the other three, each has USAGE on the schema, ``office_admin`` may call
  every API function, and PUBLIC has nothing on the schema or in it;
* settings - ``office.idempotency_window`` and ``office.coalesce_window`` are
  non-negative intervals, ``office.notify`` is ``on`` or ``off``, wherever they
  are set (this session, ``ALTER DATABASE``/``ALTER ROLE … SET``);
* probes - what mixed-version clients probe for (``runs.entry_triggered``);
* workspaces - rows that reference across workspaces (a task's parent, blocker
  or assignee, a routine's assignee in another workspace): 0.4.0 refuses new
  ones (OFW01) but does not re-check rows written before it.
* poison - the rows the daemon's loops set aside because they cannot process
  them (``office.poison``), one warning each, with the error and how to
  release the row once repaired.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict

from controlplane import schema


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    check: str
    status: Status
    detail: str
    fix: str = ""


ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")

#: ``pg_get_indexdef`` of the indexes whose predicates carry API.md's guarantees.
EXPECTED_INDEXES = {
    "idx_run_idempotency": (
        "CREATE UNIQUE INDEX idx_run_idempotency ON office.runs USING btree (idempotency_key)"
        " WHERE (idempotency_key IS NOT NULL)"
    ),
    "idx_wakeup_idempotency": (
        "CREATE UNIQUE INDEX idx_wakeup_idempotency ON office.wakeup_requests USING btree"
        " (idempotency_key) WHERE (idempotency_key IS NOT NULL)"
    ),
    "idx_office_routine_runs_active_fingerprint": (
        "CREATE INDEX idx_office_routine_runs_active_fingerprint ON office.routine_runs"
        " USING btree (routine_id, dispatch_fingerprint, created_at DESC)"
        " WHERE (status = 'task_created'::text)"
    ),
    "idx_office_routine_runs_linked_task": (
        "CREATE INDEX idx_office_routine_runs_linked_task ON office.routine_runs"
        " USING btree (linked_task_id, created_at DESC) WHERE (linked_task_id <> ''::text)"
    ),
}

#: What each index protects, for the finding.
INDEX_PURPOSE = {
    "idx_run_idempotency": "durable dedup of runs (one run per key, any status)",
    "idx_wakeup_idempotency": "durable dedup of wakeup requests",
    "idx_office_routine_runs_active_fingerprint": "the routine skip/coalesce gate",
    "idx_office_routine_runs_linked_task": "closing the routine run of a finished task",
}

WINDOW_SETTINGS = {
    "office.idempotency_window": "24 hours",
    "office.coalesce_window": "5 seconds",
}
NOTIFY_SETTING = "office.notify"


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


# --- version ----------------------------------------------------------------------


def check_version(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    package = schema.current_version()
    installed = str(_one(conn, "SELECT office.schema_version()"))
    if installed == package:
        yield Finding(
            check="version",
            status=Status.OK,
            detail=f"schema {installed} = package {package}",
        )
    elif schema.version_key(installed) < schema.version_key(package):
        yield Finding(
            check="version",
            status=Status.PROBLEM,
            detail=f"schema {installed} is older than this package ({package})",
            fix="officectl migrate (ALTER EXTENSION office UPDATE or the yoyo migrations)",
        )
    else:
        yield Finding(
            check="version",
            status=Status.PROBLEM,
            detail=f"schema {installed} is newer than this package ({package})",
            fix="upgrade office-controlplane to the release that installed this schema",
        )
    row = conn.execute(
        "SELECT e.extversion, a.default_version FROM pg_extension e"
        " LEFT JOIN pg_available_extensions a ON a.name = e.extname"
        " WHERE e.extname = 'office'"
    ).fetchone()
    if row is None:
        yield Finding(
            check="version",
            status=Status.OK,
            detail="installed as plain SQL (yoyo migrations), not as an extension",
        )
        return
    extversion, available = row
    if extversion != installed:
        yield Finding(
            check="version",
            status=Status.PROBLEM,
            detail=f"extension version {extversion} but office.schema_version() {installed}",
            fix="ALTER EXTENSION office UPDATE; if that does nothing, reinstall office",
        )
    if available is not None and schema.version_key(available) < schema.version_key(package):
        yield Finding(
            check="version",
            status=Status.WARNING,
            detail=(
                f"the server's extension files offer office {available}, this package {package}"
            ),
            fix="install this package's extension files (make install) before upgrading",
        )


# --- indexes --------------------------------------------------------------------


def check_indexes(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    rows = conn.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid AND i.indisready"
        "  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        "  JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'office' AND c.relname = ANY(%s)",
        (list(EXPECTED_INDEXES),),
    ).fetchall()
    found = {name: (definition, valid) for name, definition, valid in rows}
    for name, expected in EXPECTED_INDEXES.items():
        purpose = INDEX_PURPOSE[name]
        if name not in found:
            yield Finding(
                check="indexes",
                status=Status.PROBLEM,
                detail=f"office.{name} is missing: {purpose} is not enforced",
                fix=f"{expected}  (a unique index fails to build while duplicates exist)",
            )
            continue
        definition, valid = found[name]
        if definition != expected:
            yield Finding(
                check="indexes",
                status=Status.PROBLEM,
                detail=f"office.{name} is {definition!r}, expected {expected!r}",
                fix=f"DROP INDEX office.{name}; {expected}",
            )
        elif not valid:
            yield Finding(
                check="indexes",
                status=Status.PROBLEM,
                detail=f"office.{name} is invalid (interrupted build?): {purpose} not enforced",
                fix=f"REINDEX INDEX office.{name}",
            )
        else:
            yield Finding(check="indexes", status=Status.OK, detail=f"office.{name}: {purpose}")


# --- roles and grants -----------------------------------------------------------------


def check_roles(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    present = {
        r[0]
        for r in conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (list(ROLES),)
        ).fetchall()
    }
    missing = [r for r in ROLES if r not in present]
    if missing:
        yield Finding(
            check="roles",
            status=Status.PROBLEM,
            detail="missing roles: " + ", ".join(missing),
            fix=(
                "; ".join(f"CREATE ROLE {r} NOLOGIN" for r in missing)
                + "; then restore their grants (docs/operations.md, Roles and grants)"
            ),
        )
    else:
        yield Finding(check="roles", status=Status.OK, detail="the four office roles exist")
    if "office_admin" in present:
        others = [r for r in ROLES[:3] if r in present]
        not_member = [
            r
            for r in others
            if not _one(conn, "SELECT pg_has_role('office_admin', %s, 'MEMBER')", (r,))
        ]
        if not_member:
            yield Finding(
                check="roles",
                status=Status.PROBLEM,
                detail="office_admin is not a member of " + ", ".join(not_member),
                fix=f"GRANT {', '.join(not_member)} TO office_admin",
            )
    for role in sorted(present):
        if not _one(conn, "SELECT has_schema_privilege(%s, 'office', 'USAGE')", (role,)):
            yield Finding(
                check="grants",
                status=Status.PROBLEM,
                detail=f"{role} has no USAGE on schema office: it can call nothing",
                fix=f"GRANT USAGE ON SCHEMA office TO {role}",
            )


def check_public(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    schema_public = conn.execute(
        "SELECT a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a"
        " WHERE n.nspname = 'office' AND a.grantee = 0 ORDER BY 1"
    ).fetchall()
    if schema_public:
        privileges = ", ".join(r[0] for r in schema_public)
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail=f"PUBLIC has {privileges} on schema office",
            fix="REVOKE ALL ON SCHEMA office FROM PUBLIC",
        )
    functions = [
        r[0]
        for r in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            "  JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'office'"
            "   AND (p.proacl IS NULL OR EXISTS ("
            "        SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
            " ORDER BY 1"
        ).fetchall()
    ]
    if functions:
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail="PUBLIC may execute " + ", ".join(functions),
            fix="; ".join(f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC" for f in functions),
        )
    relations = conn.execute(
        "SELECT c.oid::regclass::text, string_agg(DISTINCT a.privilege_type, ', ')"
        "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,"
        "       aclexplode(c.relacl) a"
        " WHERE n.nspname = 'office' AND a.grantee = 0"
        " GROUP BY 1 ORDER BY 1"
    ).fetchall()
    for relation, privileges in relations:
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail=f"PUBLIC has {privileges} on {relation}",
            fix=f"REVOKE ALL ON {relation} FROM PUBLIC",
        )
    if not (schema_public or functions or relations):
        yield Finding(
            check="grants",
            status=Status.OK,
            detail="PUBLIC has nothing on schema office or in it",
        )


def check_admin_can_call(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    if not _one(conn, "SELECT count(*) FROM pg_roles WHERE rolname = 'office_admin'"):
        return
    denied = [
        r[0]
        for r in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            "  JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'office' AND left(p.proname, 1) <> '_'"
            "   AND p.prorettype <> 'trigger'::regtype"
            "   AND NOT has_function_privilege('office_admin', p.oid, 'EXECUTE')"
            " ORDER BY 1"
        ).fetchall()
    ]
    if denied:
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail="office_admin may not execute " + ", ".join(denied),
            fix="; ".join(f"GRANT EXECUTE ON FUNCTION {f} TO office_admin" for f in denied),
        )
    else:
        yield Finding(
            check="grants", status=Status.OK, detail="office_admin may call every API function"
        )


# --- settings --------------------------------------------------------------------------


def _setting_sources(conn: psycopg.Connection[Any], name: str) -> list[tuple[str, str]]:
    """Every place ``name`` is set for this database: this session (which sees
    postgresql.conf and the settings of this database and role), and each
    ``ALTER DATABASE``/``ALTER ROLE … SET`` that applies here."""
    sources: list[tuple[str, str]] = []
    session = _one(conn, "SELECT current_setting(%s, true)", (name,))
    if session:
        sources.append(("this session", str(session)))
    rows = conn.execute(
        "SELECT CASE WHEN s.setrole = 0 THEN 'ALTER DATABASE ' || quote_ident(current_database())"
        "            WHEN s.setdatabase = 0 THEN 'ALTER ROLE ' || quote_ident(r.rolname)"
        "            ELSE 'ALTER ROLE ' || quote_ident(r.rolname)"
        "                 || ' IN DATABASE ' || quote_ident(current_database()) END,"
        "       substr(c.item, length(%(name)s) + 2)"
        "  FROM pg_db_role_setting s"
        "  LEFT JOIN pg_roles r ON r.oid = s.setrole,"
        "       unnest(s.setconfig) AS c(item)"
        " WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database"
        "                             WHERE datname = current_database()))"
        "   AND c.item LIKE %(name)s || '=%%'"
        " ORDER BY 1",
        {"name": name},
    ).fetchall()
    stored = [(str(where), str(value)) for where, value in rows]
    if sources and any(value == sources[0][1] for _, value in stored):
        sources = []  # the session only shows one of those
    return sources + stored


def _interval_problem(conn: psycopg.Connection[Any], value: str) -> str | None:
    try:
        negative = _one(conn, "SELECT %s::interval < interval '0'", (value,))
    except psycopg.Error as exc:
        return f"is not an interval ({exc.sqlstate})"
    return "is negative" if negative else None


def _reset_fix(name: str, where: str) -> str:
    if where == "this session":
        return f"fix it where it is set (postgresql.conf, PGOPTIONS, the connection): {name}"
    return f"{where} SET {name} = '…' (or {where} RESET {name})"


def check_settings(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    for name, default in WINDOW_SETTINGS.items():
        sources = _setting_sources(conn, name)
        bad = False
        for where, value in sources:
            problem = _interval_problem(conn, value) if value else None
            if problem:
                bad = True
                yield Finding(
                    check="settings",
                    status=Status.PROBLEM,
                    detail=(
                        f"{name} = {value!r} ({where}) {problem}: "
                        "every enqueue under it fails or misjudges its window"
                    ),
                    fix=_reset_fix(name, where),
                )
        if not bad:
            shown = ", ".join(f"{v!r} ({w})" for w, v in sources) or f"default {default}"
            yield Finding(check="settings", status=Status.OK, detail=f"{name}: {shown}")
    sources = _setting_sources(conn, NOTIFY_SETTING)
    bad = False
    for where, value in sources:
        if value not in ("on", "off", ""):
            bad = True
            yield Finding(
                check="settings",
                status=Status.PROBLEM,
                detail=(
                    f"{NOTIFY_SETTING} = {value!r} ({where}): only 'off' turns NOTIFY off, "
                    "so this means on"
                ),
                fix=f"set it to 'off' or 'on': {_reset_fix(NOTIFY_SETTING, where)}",
            )
    if not bad:
        shown = ", ".join(f"{v!r} ({w})" for w, v in sources) or "default on"
        yield Finding(
            check="settings",
            status=Status.OK,
            detail=f"{NOTIFY_SETTING}: {shown}",
        )


# --- probes ----------------------------------------------------------------------------


def check_probes(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    present = _one(
        conn,
        "SELECT count(*) FROM pg_attribute"
        " WHERE attrelid = 'office.runs'::regclass AND attname = 'entry_triggered'"
        "   AND NOT attisdropped",
    )
    if present:
        yield Finding(check="probes", status=Status.OK, detail="office.runs.entry_triggered")
    else:
        yield Finding(
            check="probes",
            status=Status.PROBLEM,
            detail=(
                "office.runs.entry_triggered is missing: clients fall back and cannot "
                "keep entry-triggered runs from coalescing"
            ),
            fix="officectl migrate (the column arrives with office 0.2.0)",
        )


# --- workspaces -------------------------------------------------------------------------

#: How many cross-workspace rows a finding names (the count is always exact).
WORKSPACE_SAMPLE = 10

#: Each kind of reference that must stay inside one workspace: what it is, and
#: a query of (row, its workspace, what it references, that one's workspace).
WORKSPACE_REFERENCES = {
    "task parent": (
        "SELECT t.id, t.workspace_id, p.id, p.workspace_id FROM office.tasks t"
        " JOIN office.tasks p ON p.id = t.parent_id WHERE p.workspace_id <> t.workspace_id"
    ),
    "task blocker": (
        "SELECT t.id, t.workspace_id, b.id, b.workspace_id FROM office.task_blockers e"
        " JOIN office.tasks t ON t.id = e.task_id JOIN office.tasks b ON b.id = e.blocker_task_id"
        " WHERE b.workspace_id <> t.workspace_id"
    ),
    "task assignee": (
        "SELECT t.id, t.workspace_id, a.id, a.workspace_id FROM office.tasks t"
        " JOIN office.agent_profiles a ON a.id = t.assignee_agent_profile_id"
        " WHERE a.workspace_id <> t.workspace_id"
    ),
    "routine assignee": (
        "SELECT r.id, r.workspace_id, a.id, a.workspace_id FROM office.routines r"
        " JOIN office.agent_profiles a ON a.id = r.assignee_agent_profile_id"
        " WHERE a.workspace_id <> r.workspace_id"
    ),
}


def check_workspaces(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    found = False
    for what, query in WORKSPACE_REFERENCES.items():
        try:
            rows = conn.execute(
                f"SELECT count(*) OVER (), x.* FROM ({query}) AS x(id, space, other, other_space)"
                ' ORDER BY x.id COLLATE "C", x.other COLLATE "C"'
                f" LIMIT {WORKSPACE_SAMPLE}"
            ).fetchall()
        except psycopg.errors.InsufficientPrivilege:
            # The office roles reach tables through functions only; this
            # check reads them directly, as the owner or a superuser can.
            yield Finding(
                check="workspaces",
                status=Status.WARNING,
                detail="this role cannot read the office tables: cross-workspace rows not checked",
                fix="run officectl doctor as the owner of schema office or a superuser",
            )
            return
        if not rows:
            continue
        found = True
        sample = "; ".join(
            f"{row} ({space}) -> {other} ({other_space})"
            for _, row, space, other, other_space in rows
        )
        yield Finding(
            check="workspaces",
            status=Status.WARNING,
            detail=(
                f"{rows[0][0]} {what} reference(s) across workspaces, written before 0.4.0:"
                f" {sample}"
            ),
            fix=(
                "reassign, re-parent or unblock them within one workspace (a write that keeps"
                " them is refused with OFW01); sharding by workspace needs none left"
            ),
        )
    if not found:
        yield Finding(
            check="workspaces",
            status=Status.OK,
            detail="no task or routine references another workspace",
        )


# --- poison ----------------------------------------------------------------------------

#: How many set-aside rows are listed one by one (the rest are counted).
POISON_LISTED = 50

#: What the row id of each loop's set-aside rows is, and where to look at it.
POISON_ROWS = {
    "subscriber": "event {id} (SELECT * FROM office.events WHERE id = {id})",
    "wakeups": "wakeup request {id!r} (office.wakeup_requests)",
    "cron": "routine trigger {id!r} (office.routine_triggers)",
    "sweep": "parent task {id!r} (office.tasks)",
    "recovery": "run {id!r} (office.runs)",
    "prune": "row {id!r}",
}


def check_poison(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    if _one(conn, "SELECT to_regclass('office.poison')") is None:
        return  # before 0.4.0 (the version check says so)
    if not _one(conn, "SELECT has_table_privilege('office.poison', 'SELECT')"):
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail="cannot read office.poison (the rows the daemon set aside) as this role",
            fix="run officectl doctor as a member of office_reader or office_admin",
        )
        return
    rows = conn.execute(
        "SELECT loop, row_id, reason, sqlstate, set_aside_at, count(*) OVER () FROM office.poison"
        ' ORDER BY set_aside_at, loop, row_id COLLATE "C" LIMIT %s',
        (POISON_LISTED,),
    ).fetchall()
    if not rows:
        yield Finding(
            check="poison",
            status=Status.OK,
            detail="no row set aside by the daemon's loops (office.poison is empty)",
        )
        return
    for loop, row_id, reason, sqlstate, set_aside_at, _ in rows:
        what = POISON_ROWS[loop].format(id=row_id)
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail=(
                f"the {loop} loop set aside {what} at {set_aside_at:%Y-%m-%d %H:%M:%S%z}: "
                f"{reason}" + (f" (SQLSTATE {sqlstate})" if sqlstate else "")
            ),
            fix=(
                f"repair or delete the row, then SELECT office.release_poison('{loop}', "
                f"{_literal(row_id)}) to have the loop process it again"
                " (docs/operations.md, Poison)"
            ),
        )
    total = int(rows[0][5])
    if total > len(rows):
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail=f"{total - len(rows)} more rows set aside (SELECT * FROM office.poison)",
        )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


CHECKS = (
    check_version,
    check_indexes,
    check_roles,
    check_public,
    check_admin_can_call,
    check_settings,
    check_probes,
    check_workspaces,
    check_poison,
)


def run_checks(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Every finding for the database of ``conn`` (an autocommit connection)."""
    installed = _one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'office'")
    if not installed:
        return [
            Finding(
                check="version",
                status=Status.PROBLEM,
                detail="office is not installed in this database (no schema office)",
                fix="officectl migrate (or CREATE EXTENSION office)",
            )
        ]
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(conn))
    return findings


def healthy(findings: Iterable[Finding]) -> bool:
    return all(f.status is not Status.PROBLEM for f in findings)
