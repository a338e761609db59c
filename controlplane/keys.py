"""The key builders of docs/api.md §1, in Python.

Twins of the SQL functions in ``sql/10_keys.sql``: same names, same parameter
names and order, byte-identical results (both are checked against
``tests/vectors/keys.json``). Formats and vectors: docs/domain.md §3.

Rules: a ``None`` argument gives ``None`` (``routine_key``: a ``None``
``source`` or ``routine_id``; its other arguments are optional); an empty id,
an empty or ``None`` element of ``blocker_ids`` or a negative generation
raises :class:`~controlplane.errors.InvalidArgument` (SQLSTATE 22023). Things
PostgreSQL could never receive are invalid too: a NUL character in a text, a
naive datetime, a generation outside bigint. The builders only concatenate;
they do not police ``:`` or ``,`` inside ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import overload

from controlplane.errors import InvalidArgument

__all__ = [
    "assignment_key",
    "blocker_digest",
    "blockers_resolved_key",
    "comment_key",
    "routine_fingerprint",
    "routine_key",
    "second_precision_text",
    "wake_operation_id",
]

_BIGINT_MAX = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _utf8(function: str, parameter: str, value: str) -> bytes:
    """The UTF-8 bytes of a text argument; refuses what PG text cannot hold."""
    if "\x00" in value:
        raise InvalidArgument(
            f"office.{function}: {parameter} must not contain NUL (got {value!r})"
        )
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"office.{function}: {parameter} is not valid Unicode (got {value!r})"
        ) from exc


def _text(function: str, parameter: str, value: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"office.{function}: {parameter} must be text (got {value!r})")
    _utf8(function, parameter, value)
    return value


def _id(function: str, parameter: str, value: str) -> str:
    _text(function, parameter, value)
    if value == "":
        raise InvalidArgument(
            f"office.{function}: {parameter} must not be empty (got {_literal(value)})"
        )
    return value


def _aware(function: str, parameter: str, value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidArgument(f"office.{function}: {parameter} must be a datetime (got {value!r})")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(
            f"office.{function}: {parameter} must be timezone-aware (got naive {value.isoformat()})"
        )
    return value


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assignment_key(
    task_id: str | None, agent_profile_id: str | None, generation: int | None
) -> str | None:
    """``task_assigned:<task_id>:<agent_profile_id>:<generation>`` (docs/domain.md §3.1)."""
    if task_id is None or agent_profile_id is None or generation is None:
        return None
    _id("assignment_key", "task_id", task_id)
    _id("assignment_key", "agent_profile_id", agent_profile_id)
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise InvalidArgument(
            f"office.assignment_key: generation must be an integer (got {generation!r})"
        )
    if generation < 0:
        raise InvalidArgument(
            f"office.assignment_key: generation must not be negative (got {generation})"
        )
    if generation > _BIGINT_MAX:
        raise InvalidArgument(
            f"office.assignment_key: generation is out of range for bigint (got {generation})"
        )
    return f"task_assigned:{task_id}:{agent_profile_id}:{generation}"


# Typed for both uses: ids in hand give a key (what a producer passes to
# enqueue_run), a None gives None like every builder.
@overload
def comment_key(comment_id: str, agent_profile_id: str) -> str: ...
@overload
def comment_key(comment_id: str | None, agent_profile_id: str | None) -> str | None: ...
def comment_key(comment_id: str | None, agent_profile_id: str | None) -> str | None:
    """``task_comment:<comment_id>:<agent_profile_id>``: the key of a comment's
    wake of an agent; a run with such a key never coalesces (docs/api.md §3)."""
    if comment_id is None or agent_profile_id is None:
        return None
    _id("comment_key", "comment_id", comment_id)
    _id("comment_key", "agent_profile_id", agent_profile_id)
    return f"task_comment:{comment_id}:{agent_profile_id}"


def blocker_digest(blocker_ids: Sequence[str | None] | None) -> str | None:
    """Lowercase hex SHA-256 of the ids sorted bytewise and joined with ``,``
    (docs/domain.md §3.2). An empty sequence is the digest of the empty string."""
    if blocker_ids is None:
        return None
    if isinstance(blocker_ids, str | bytes):
        raise InvalidArgument(
            f"office.blocker_digest: blocker_ids must be a sequence of ids, not text "
            f"(got {blocker_ids!r})"
        )
    encoded: list[bytes] = []
    for position, blocker_id in enumerate(blocker_ids, start=1):
        if blocker_id is None or blocker_id == "":
            shown = "NULL" if blocker_id is None else _literal(blocker_id)
            raise InvalidArgument(
                f"office.blocker_digest: blocker_ids element {position} must be a non-empty id "
                f"(got {shown} in blocker_ids {list(blocker_ids)!r})"
            )
        _text("blocker_digest", f"blocker_ids element {position}", blocker_id)
        encoded.append(_utf8("blocker_digest", f"blocker_ids element {position}", blocker_id))
    # Bytewise order of the UTF-8 bytes: what COLLATE "C" compares.
    return _sha256_hex(b",".join(sorted(encoded)))


def blockers_resolved_key(
    blocked_task_id: str | None, blocker_ids: Sequence[str | None] | None
) -> str | None:
    """``blockers_resolved:<blocked_task_id>:<blocker_digest>`` (docs/domain.md §3.3)."""
    if blocked_task_id is None or blocker_ids is None:
        return None
    _id("blockers_resolved_key", "blocked_task_id", blocked_task_id)
    return f"blockers_resolved:{blocked_task_id}:{blocker_digest(blocker_ids)}"


def wake_operation_id(
    parent_task_id: str | None, child_set_key: str | None, generation: str | None
) -> str | None:
    """``task_children_completed:<parent>:<sha256hex(parent \\0 child ids \\0
    generation)>`` where the child ids are the non-empty ``child_set_key``
    items with everything from their last ``:`` removed (docs/domain.md §3.5)."""
    if parent_task_id is None or child_set_key is None or generation is None:
        return None
    _id("wake_operation_id", "parent_task_id", parent_task_id)
    _text("wake_operation_id", "child_set_key", child_set_key)
    _text("wake_operation_id", "generation", generation)
    child_ids = [
        element[: element.rindex(":")] if ":" in element else element
        for element in child_set_key.split(",")
        if element != ""
    ]
    canonical = ",".join(child_ids)
    digest = _sha256_hex(
        _utf8("wake_operation_id", "parent_task_id", parent_task_id)
        + b"\x00"
        + _utf8("wake_operation_id", "child_set_key", canonical)
        + b"\x00"
        + _utf8("wake_operation_id", "generation", generation)
    )
    return f"task_children_completed:{parent_task_id}:{digest}"


def second_precision_text(ts: datetime | None) -> str | None:
    """The instant as ``YYYY-MM-DD HH:MM:SS`` in UTC, truncated to whole
    seconds (docs/domain.md §2.22, §3.10). ``ts`` must be timezone-aware."""
    if ts is None:
        return None
    _aware("second_precision_text", "ts", ts)
    try:
        utc = ts.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidArgument(
            f"office.second_precision_text: ts is out of range in UTC (got {ts.isoformat()})"
        ) from exc
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d} "
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    )


def routine_fingerprint(
    title: str | None, description: str | None, assignee: str | None
) -> str | None:
    """The first 16 bytes of ``sha256(title|description|assignee)`` as 32 hex
    characters (docs/domain.md §3.9). Empty texts are allowed."""
    if title is None or description is None or assignee is None:
        return None
    data = b"|".join(
        (
            _utf8("routine_fingerprint", "title", _text("routine_fingerprint", "title", title)),
            _utf8(
                "routine_fingerprint",
                "description",
                _text("routine_fingerprint", "description", description),
            ),
            _utf8(
                "routine_fingerprint",
                "assignee",
                _text("routine_fingerprint", "assignee", assignee),
            ),
        )
    )
    return hashlib.sha256(data).digest()[:16].hex()


def routine_key(
    source: str | None,
    routine_id: str | None,
    trigger_id: str | None,
    claimed_tick: datetime | None,
    routine_run_id: str | None,
    explicit_key: str | None = None,
) -> str | None:
    """The routine wakeup key (docs/domain.md §3.8), or ``None`` for keyless.

    * a non-empty ``explicit_key``: ``routine:<routine_id>:<source>:<explicit_key>``;
    * ``cron`` with a claimed tick (and a trigger):
      ``routine:<routine_id>:<trigger_id>:tick:<unix seconds, floor>``;
    * ``manual``/``webhook`` with a run id: ``routine:<routine_id>:run:<routine_run_id>``;
    * anything else: ``None``. Never raises for an unknown source.
    """
    if source is None or routine_id is None:
        return None
    _text("routine_key", "source", source)
    _id("routine_key", "routine_id", routine_id)
    if trigger_id is not None:
        _text("routine_key", "trigger_id", trigger_id)
    if routine_run_id is not None:
        _text("routine_key", "routine_run_id", routine_run_id)
    if claimed_tick is not None:
        _aware("routine_key", "claimed_tick", claimed_tick)
    if explicit_key is not None:
        _text("routine_key", "explicit_key", explicit_key)
        if explicit_key != "":
            return f"routine:{routine_id}:{source}:{explicit_key}"
    if source == "cron":
        if claimed_tick is None or trigger_id is None or trigger_id == "":
            return None
        seconds = (claimed_tick - _EPOCH) // _ONE_SECOND
        return f"routine:{routine_id}:{trigger_id}:tick:{seconds}"
    if source in ("manual", "webhook"):
        if routine_run_id is None or routine_run_id == "":
            return None
        return f"routine:{routine_id}:run:{routine_run_id}"
    return None
