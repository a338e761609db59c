"""The doctor's checks (:mod:`controlplane.doctor`): catalog probes, not API
calls.

What ``officectl doctor`` reads on its own connection: the catalog (is the
installation sound?), the session's settings, and - as the owner - rows
that no office function returns."""

from __future__ import annotations

from controlplane.client.queries import Query

DOCTOR_OFFICE_SCHEMA = Query("SELECT count(*) AS value FROM pg_namespace WHERE nspname = 'office'")
DOCTOR_EXTENSION = Query(
    "SELECT e.extversion, a.default_version FROM pg_extension e"
    " LEFT JOIN pg_available_extensions a ON a.name = e.extname"
    " WHERE e.extname = 'office'"
)
DOCTOR_INDEXES = Query(
    "SELECT c.relname, pg_get_indexdef(i.indexrelid) AS definition,"
    " i.indisvalid AND i.indisready AS valid"
    " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'office' AND c.relname = ANY(%(names)s)"
)
DOCTOR_ROLES = Query("SELECT rolname FROM pg_roles WHERE rolname = ANY(%(names)s)")
DOCTOR_ADMIN_MEMBER_OF = Query("SELECT pg_has_role('office_admin', %(role)s, 'MEMBER') AS value")
DOCTOR_SCHEMA_USAGE = Query("SELECT has_schema_privilege(%(role)s, 'office', 'USAGE') AS value")
DOCTOR_PUBLIC_ON_SCHEMA = Query(
    "SELECT a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a"
    " WHERE n.nspname = 'office' AND a.grantee = 0 ORDER BY 1"
)
DOCTOR_PUBLIC_FUNCTIONS = Query(
    "SELECT p.oid::regprocedure::text AS function FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'office'"
    " AND (p.proacl IS NULL OR EXISTS ("
    " SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
    " ORDER BY 1"
)
DOCTOR_PUBLIC_RELATIONS = Query(
    "SELECT c.oid::regclass::text AS relation,"
    " string_agg(DISTINCT a.privilege_type, ', ') AS privileges"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,"
    " aclexplode(c.relacl) a"
    " WHERE n.nspname = 'office' AND a.grantee = 0"
    " GROUP BY 1 ORDER BY 1"
)
DOCTOR_ADMIN_EXISTS = Query("SELECT count(*) AS value FROM pg_roles WHERE rolname = 'office_admin'")
DOCTOR_ADMIN_DENIED = Query(
    "SELECT p.oid::regprocedure::text AS function FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'office' AND left(p.proname, 1) <> '_'"
    " AND p.prorettype <> 'trigger'::regtype"
    " AND NOT has_function_privilege('office_admin', p.oid, 'EXECUTE')"
    " ORDER BY 1"
)
DOCTOR_SESSION_SETTING = Query("SELECT current_setting(%(name)s, true) AS value")
DOCTOR_STORED_SETTINGS = Query(
    "SELECT CASE WHEN s.setrole = 0 THEN 'ALTER DATABASE ' || quote_ident(current_database())"
    " WHEN s.setdatabase = 0 THEN 'ALTER ROLE ' || quote_ident(r.rolname)"
    " ELSE 'ALTER ROLE ' || quote_ident(r.rolname)"
    " || ' IN DATABASE ' || quote_ident(current_database()) END AS place,"
    " substr(c.item, length(%(name)s) + 2) AS value"
    " FROM pg_db_role_setting s"
    " LEFT JOIN pg_roles r ON r.oid = s.setrole,"
    " unnest(s.setconfig) AS c(item)"
    " WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database"
    " WHERE datname = current_database()))"
    " AND c.item LIKE %(name)s || '=%%'"
    " ORDER BY 1"
)
DOCTOR_NEGATIVE_INTERVAL = Query("SELECT %(value)s::interval < interval '0' AS value")
DOCTOR_ENTRY_TRIGGERED = Query(
    "SELECT count(*) AS value FROM pg_attribute"
    " WHERE attrelid = 'office.runs'::regclass AND attname = 'entry_triggered'"
    " AND NOT attisdropped"
)


def _across_workspaces(references: str) -> Query:
    """The first ``limit`` rows (and their count) of a query of (row, its
    workspace, what it references, that one's workspace)."""
    return Query(
        "SELECT count(*) OVER () AS total, x.* FROM (" + references + ")"
        " AS x(id, space, other, other_space)"
        ' ORDER BY x.id COLLATE "C", x.other COLLATE "C" LIMIT %(limit)s'
    )


#: Each kind of reference that must stay inside one workspace.
DOCTOR_ACROSS_WORKSPACES = {
    "task parent": _across_workspaces(
        "SELECT t.id, t.workspace_id, p.id, p.workspace_id FROM office.tasks t"
        " JOIN office.tasks p ON p.id = t.parent_id WHERE p.workspace_id <> t.workspace_id"
    ),
    "task blocker": _across_workspaces(
        "SELECT t.id, t.workspace_id, b.id, b.workspace_id FROM office.task_blockers e"
        " JOIN office.tasks t ON t.id = e.task_id JOIN office.tasks b ON b.id = e.blocker_task_id"
        " WHERE b.workspace_id <> t.workspace_id"
    ),
    "task assignee": _across_workspaces(
        "SELECT t.id, t.workspace_id, a.id, a.workspace_id FROM office.tasks t"
        " JOIN office.agent_profiles a ON a.id = t.assignee_agent_profile_id"
        " WHERE a.workspace_id <> t.workspace_id"
    ),
    "routine assignee": _across_workspaces(
        "SELECT r.id, r.workspace_id, a.id, a.workspace_id FROM office.routines r"
        " JOIN office.agent_profiles a ON a.id = r.assignee_agent_profile_id"
        " WHERE a.workspace_id <> r.workspace_id"
    ),
}
DOCTOR_POISON_TABLE = Query("SELECT to_regclass('office.poison') AS value")
DOCTOR_WAKE_SPEND_TABLE = Query("SELECT to_regclass('office.wake_spend') AS value")
DOCTOR_BUDGETS_READABLE = Query(
    "SELECT has_table_privilege('office.agent_profiles', 'SELECT')"
    " AND has_table_privilege('office.wake_policies', 'SELECT')"
    " AND has_table_privilege('office.wake_spend', 'SELECT') AS value"
)
DOCTOR_POISON_READABLE = Query("SELECT has_table_privilege('office.poison', 'SELECT') AS value")
DOCTOR_POISON = Query(
    "SELECT loop, row_id, reason, sqlstate, set_aside_at, count(*) OVER () AS total"
    ' FROM office.poison ORDER BY set_aside_at, loop, row_id COLLATE "C" LIMIT %(limit)s'
)
DOCTOR_NATIVE_FUNCTIONS = Query(
    "SELECT count(*) AS value FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
    " WHERE p.pronamespace = 'office'::regnamespace AND l.lanname = 'c'"
)
DOCTOR_HAS_NATIVE_BINDING = Query(
    "SELECT to_regprocedure('office._native_binding()') IS NOT NULL AS value"
)
DOCTOR_NATIVE_BINDING = Query("SELECT office._native_binding() AS value")
