"""The doctor's checks of the installation itself: versions, the indexes
that carry docs/api.md's guarantees, roles and grants (see :mod:`controlplane.doctor`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from controlplane import schema
from controlplane.client.queries import doctor as q
from controlplane.client.queries.runs import SCHEMA_VERSION
from controlplane.doctor.findings import Finding, Status, one, rows

ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")

#: ``pg_get_indexdef`` of the indexes whose predicates carry docs/api.md's guarantees.
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


# --- version ----------------------------------------------------------------------


def check_version(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    package = schema.current_version()
    installed = str(one(conn, SCHEMA_VERSION))
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
    extension = rows(conn, q.DOCTOR_EXTENSION)
    if not extension:
        yield Finding(
            check="version",
            status=Status.OK,
            detail="installed as plain SQL (yoyo migrations), not as an extension",
        )
        return
    extversion, available = extension[0]["extversion"], extension[0]["default_version"]
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


# --- native definitions --------------------------------------------------------


def check_native(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    """Which definitions serve the hot path (:func:`native_finding`)."""
    native = int(one(conn, q.DOCTOR_NATIVE_FUNCTIONS) or 0)
    said = str(one(conn, q.DOCTOR_NATIVE_BINDING)) if one(conn, q.DOCTOR_HAS_NATIVE_BINDING) else ""
    yield native_finding(native, said)


def native_finding(native: int, said: str) -> Finding:
    """The finding for ``native`` C functions in schema office and what the
    install said (``office._native_binding()``, since 0.5.0; "" before):
    the C definitions (sql/native/) are bound only when the library's ABI
    version is the schema's, else PL/pgSQL serves, and the install says why."""
    plpgsql_only = said.startswith("PL/pgSQL only")
    if native and not plpgsql_only:
        reason = f" ({said.removeprefix('native: ')})" if said else ""
        return Finding(
            check="native", status=Status.OK, detail=f"native: {native} functions{reason}"
        )
    if native:
        return Finding(
            check="native",
            status=Status.PROBLEM,
            detail=f"{native} functions are bound to a library the install refused ({said})",
            fix="make install from this release's sources, then reinstall the extension",
        )
    if "library is version" in said or "binding the library failed" in said:
        return Finding(
            check="native",
            status=Status.WARNING,
            detail=f"{said} (the install warned): correct, without the native speed-up",
            fix="make install from this release's sources, then reinstall the extension",
        )
    reason = said.removeprefix("PL/pgSQL only: ") or "this schema records no reason (before 0.5.0)"
    return Finding(check="native", status=Status.OK, detail=f"PL/pgSQL only, because {reason}")


# --- indexes --------------------------------------------------------------------


def check_indexes(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    found = {
        row["relname"]: (row["definition"], row["valid"])
        for row in rows(conn, q.DOCTOR_INDEXES, {"names": list(EXPECTED_INDEXES)})
    }
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
    present = {r["rolname"] for r in rows(conn, q.DOCTOR_ROLES, {"names": list(ROLES)})}
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
        not_member = [r for r in others if not one(conn, q.DOCTOR_ADMIN_MEMBER_OF, {"role": r})]
        if not_member:
            yield Finding(
                check="roles",
                status=Status.PROBLEM,
                detail="office_admin is not a member of " + ", ".join(not_member),
                fix=f"GRANT {', '.join(not_member)} TO office_admin",
            )
    for role in sorted(present):
        if not one(conn, q.DOCTOR_SCHEMA_USAGE, {"role": role}):
            yield Finding(
                check="grants",
                status=Status.PROBLEM,
                detail=f"{role} has no USAGE on schema office: it can call nothing",
                fix=f"GRANT USAGE ON SCHEMA office TO {role}",
            )


def check_public(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    schema_public = rows(conn, q.DOCTOR_PUBLIC_ON_SCHEMA)
    if schema_public:
        privileges = ", ".join(r["privilege_type"] for r in schema_public)
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail=f"PUBLIC has {privileges} on schema office",
            fix="REVOKE ALL ON SCHEMA office FROM PUBLIC",
        )
    functions = [r["function"] for r in rows(conn, q.DOCTOR_PUBLIC_FUNCTIONS)]
    if functions:
        yield Finding(
            check="grants",
            status=Status.PROBLEM,
            detail="PUBLIC may execute " + ", ".join(functions),
            fix="; ".join(f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC" for f in functions),
        )
    relations = [(r["relation"], r["privileges"]) for r in rows(conn, q.DOCTOR_PUBLIC_RELATIONS)]
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
    if not one(conn, q.DOCTOR_ADMIN_EXISTS):
        return
    denied = [r["function"] for r in rows(conn, q.DOCTOR_ADMIN_DENIED)]
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
