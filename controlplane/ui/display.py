"""How the dashboard shows a value: ids, times, labels, badges.

Pure functions of the value (and of "now" for a relative time), registered
as Jinja filters and globals by :func:`controlplane.ui.app._environment`;
the markup around them is in ``templates/_ui.html``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, get_args, get_origin

#: A time-ordered UUID's first 12 hex digits are its millisecond clock, the
#: same for every id made in one burst; its tail is random and tells ids
#: apart, so a shortened UUID keeps the tail.
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)

#: The longest id shown whole.
SHORT_ID_LENGTH = 18

#: Column names of the generic lists, as an operator reads them, where the
#: name without underscores would not do.
LABELS = {
    "agent_profile_id": "agent",
    "assignee_agent_profile_id": "assignee",
    "workspace_id": "workspace",
    "parent_id": "parent",
    "task_id": "task",
    "run_id": "run",
    "is_ephemeral": "ephemeral",
    "idempotency_key": "key",
    "requested_at": "requested",
    "created_at": "created",
    "updated_at": "updated",
    "claimed_at": "claimed",
    "processed_at": "processed",
    "finished_at": "finished",
    "last_run_at": "last run",
    "next_run_at": "next tick",
    "last_fired_at": "last fired",
    "assignment_generation": "assignment gen.",
    "child_generation": "child gen.",
    "coalesced_count": "coalesced",
    "error_message": "error",
    "concurrency_policy": "concurrency",
    "catch_up_policy": "catch-up",
    "wakeup_reason": "reason",
    "coalesced_into_run_id": "coalesced into",
    "dispatched_run_id": "run",
}

#: Badge colour of each status word (runs, tasks, agents, routines, routine
#: runs, outcomes), compared in lower case; any other word is a plain badge.
BADGES = {
    **dict.fromkeys(["queued", "todo", "created", "scheduling", "received", "review"], "wait"),
    **dict.fromkeys(["claimed", "running", "in_progress", "task_created"], "busy"),
    **dict.fromkeys(["finished", "completed", "done", "idle", "active", "enqueued"], "ok"),
    **dict.fromkeys(["failed", "error", "poisoned"], "bad"),
    **dict.fromkeys(
        ["cancelled", "paused", "stopped", "archived", "skipped", "coalesced", "deduped"], "off"
    ),
    **dict.fromkeys(
        ["guarded", "held", "blocked", "waiting_for_input", "pending_approval"], "warn"
    ),
}


def label(column: str) -> str:
    """A column's human label: :data:`LABELS`, else the name without
    underscores (never the raw ``snake_case`` name)."""
    return LABELS.get(column, column.replace("_", " "))


def short_id(value: object) -> str:
    """An id as a table cell shows it: whole when short, a UUID as ``…`` and
    its random tail, any other long id as its head and ``…``."""
    text = str(value)
    if _UUID.match(text):
        return "…" + text[-8:]
    if len(text) <= SHORT_ID_LENGTH:
        return text
    return text[: SHORT_ID_LENGTH - 2] + "…"


def badge(word: object) -> str:
    """The CSS class of a status word's badge."""
    return "badge " + BADGES.get(str(word).lower(), "plain")


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """A time as "12 s ago" or "in 3 min" from ``now`` (default: the
    clock); "—" for none."""
    if value is None:
        return "—"
    delta = ((now or datetime.now(UTC)) - _aware(value)).total_seconds()
    future, seconds = delta < 0, int(abs(delta))
    if seconds < 120:
        text = f"{seconds} s"
    elif seconds < 7200:
        text = f"{seconds // 60} min"
    elif seconds < 172800:
        text = f"{seconds // 3600} h"
    else:
        text = f"{seconds // 86400} d"
    return f"in {text}" if future else f"{text} ago"


def utc(value: datetime | None) -> str:
    """A time in UTC to the second, as the hover of a relative time shows it."""
    if value is None:
        return ""
    return _aware(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: datetime | None) -> str:
    """A time for a ``<time datetime>`` attribute."""
    if value is None:
        return ""
    return _aware(value).astimezone(UTC).isoformat()


def _aware(value: datetime) -> datetime:
    """A naive time read as UTC (the server sends timestamptz; a naive one
    comes only from a timestamp column)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def column_kind(name: str, annotation: object) -> str:
    """How a generic list shows a model field: ``time``, ``bool``,
    ``number``, ``json``, ``status`` (an enum: a badge), ``id`` (``id`` or
    ``*_id``: shortened, with a copy button) or ``text``."""
    types = set(_leaf_types(annotation))
    types.discard(type(None))
    if types and types <= {datetime}:
        return "time"
    if types == {bool}:
        return "bool"
    if types and types <= {int, float, Decimal}:
        return "number"
    if types & {dict, list, Any}:
        return "json"
    if types and all(isinstance(t, type) and issubclass(t, Enum) for t in types):
        return "status"
    if name == "id" or name.endswith("_id"):
        return "id"
    return "text"


def _leaf_types(annotation: object) -> list[object]:
    args = get_args(annotation)
    if not args:
        origin = get_origin(annotation)
        return [origin if origin is not None else annotation]
    origin = get_origin(annotation)
    if origin in (dict, list):
        return [origin]
    return [leaf for arg in args for leaf in _leaf_types(arg)]
