"""The statements of the outbox (:mod:`controlplane.client.events`; docs/api.md §6)."""

from __future__ import annotations

from controlplane.client.queries import Query

CLAIM_EVENTS = Query(
    "SELECT * FROM office.claim_events(consumer => %(consumer)s, max_rows => %(max_rows)s,"
    " visibility => %(visibility)s)"
)

# The same claim for the event subscriber, as values that always load: the
# payload as text (decoded row by row, where a failure concerns one event)
# and a creation time outside what Python represents as NULL (the row then
# fails to validate, on its own). claim_events itself sets claimed_at and
# visible_at.
CLAIM_EVENT_ROWS = Query("""
SELECT e.id, e.topic, e.task_id, e.payload::text AS payload, e.deliveries, e.claimed_by,
       e.claimed_at, e.visible_at,
       CASE WHEN e.created_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'
            THEN e.created_at END AS created_at
  FROM office.claim_events(consumer => %(consumer)s, max_rows => %(max_rows)s,
                           visibility => %(visibility)s) e
 ORDER BY e.id
""")

ACK_EVENTS = Query("SELECT office.ack_events(ids => %(ids)s::bigint[]) AS count")

PRUNE_EVENTS = Query("SELECT office.prune_events(older_than => %(older_than)s) AS count")
