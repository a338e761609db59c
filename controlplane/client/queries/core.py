"""The statements of the client core (:mod:`controlplane.client.core`) and of
its two drivers: the schema probe, the dedup-index lookups and the session
reset after a raw statement."""

from __future__ import annotations

from controlplane.client.queries import Query

# The SQL a client builds itself runs on the caller's search_path, which may
# put a schema someone else controls first: it names pg_catalog for every
# function and operator (docs/architecture.md, principle 8). pg_attribute, not
# information_schema.columns: the latter hides the columns of a table the
# role has no privilege on, and no office role may read office.runs directly.
PROBE_RUNS_COLUMN = Query(
    "SELECT 1 FROM pg_catalog.pg_attribute"
    " WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('office.runs')"
    " AND attname OPERATOR(pg_catalog.=) %(column)s"
    " AND attnum OPERATOR(pg_catalog.>) 0 AND NOT attisdropped"
)

# Who holds a key that a statement collided with (raw INSERT, older schema).
FIND_RUN_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.runs"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)
FIND_WAKEUP_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.wakeup_requests"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)

# What a connection that ran raw statements gets before it is reused (the
# default reset of asyncpg pools; psycopg allows several statements here
# because there are no parameters).
RESET_SESSION = Query(
    "CLOSE ALL; UNLISTEN *; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all()",
    parametrized=False,
)
