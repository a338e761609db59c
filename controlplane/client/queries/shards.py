"""The statements that tell which databases the background work runs on
(:mod:`controlplane.scaleout.shards`), one module of :mod:`controlplane.client.queries`
in the same form, read from the catalog of the database a DSN names.

A proxy database is one with the ``office_proxy`` extension; its shards are
the partitions of server ``office_cluster`` (docs/api.md §8), reached as the user
(and with the password) of the user mapping PL/Proxy itself would use: the
current user's, else PUBLIC's. ``pg_user_mappings`` shows a mapping's options
only to its user and to the server's owner, so a role that cannot see them
gets NULL and connects as itself.
"""

from __future__ import annotations

from controlplane.client.queries import Query

PROXY_EXTENSION = Query(
    "SELECT extversion AS value FROM pg_catalog.pg_extension"
    " WHERE extname OPERATOR(pg_catalog.=) 'office_proxy'"
)
CLUSTER_SERVER = Query(
    "SELECT s.srvoptions AS options,"
    " (SELECT m.umoptions FROM pg_catalog.pg_user_mappings m"
    "   WHERE m.srvid OPERATOR(pg_catalog.=) s.oid"
    "     AND m.usename OPERATOR(pg_catalog.=) ANY (ARRAY[current_user::text, 'public'])"
    "   ORDER BY m.usename OPERATOR(pg_catalog.=) 'public' LIMIT 1) AS mapping"
    " FROM pg_catalog.pg_foreign_server s WHERE s.srvname OPERATOR(pg_catalog.=) %(server)s"
)
