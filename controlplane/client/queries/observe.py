"""``officectl stats`` and ``events tail`` (:mod:`controlplane.cli.observe`).

Read only: the tail reads office.events by id and never claims or
acknowledges anything."""

from __future__ import annotations

from controlplane.client.queries import Query

OBSERVE_STATS = {
    "dedup_stats": Query(
        "SELECT queue, reason, kind, total FROM office.dedup_stats"
        ' ORDER BY queue COLLATE "C", reason COLLATE "C", kind COLLATE "C"'
    ),
    "keyless_stats": Query(
        "SELECT reason, cause, total FROM office.keyless_stats"
        ' ORDER BY reason COLLATE "C", cause COLLATE "C"'
    ),
    "queue_stats": Query(
        "SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats"
    ),
}
_EVENT_COLUMNS = (
    "id, topic, task_id, payload, created_at, processed_at, claimed_by, claimed_at, deliveries"
)
OBSERVE_NEWEST_EVENTS = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events ORDER BY id DESC LIMIT %(limit)s"
)
OBSERVE_NEWEST_EVENT_ID = Query("SELECT coalesce(max(id), 0) AS value FROM office.events")
OBSERVE_EVENTS_AFTER = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events WHERE id > %(since)s ORDER BY id LIMIT %(limit)s"
)
OBSERVE_EVENTS_POLL = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events"
    " WHERE id > %(last)s OR id = ANY(%(gaps)s::bigint[])"
    " ORDER BY id LIMIT %(rows)s"
)
