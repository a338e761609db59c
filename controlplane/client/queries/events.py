"""The statements of the outbox (:mod:`controlplane.client.events`; API.md §6)."""

from __future__ import annotations

from controlplane.client.queries import Query

CLAIM_EVENTS = Query(
    "SELECT * FROM office.claim_events(consumer => %(consumer)s, max_rows => %(max_rows)s,"
    " visibility => %(visibility)s)"
)

ACK_EVENTS = Query("SELECT office.ack_events(ids => %(ids)s::bigint[]) AS count")

PRUNE_EVENTS = Query("SELECT office.prune_events(older_than => %(older_than)s) AS count")
