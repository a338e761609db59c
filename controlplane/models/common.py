"""What every capability's results share: the queue's outcomes and dedup
kinds (docs/api.md §2-§3), and the decoding of ``jsonb`` columns for both drivers."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

__all__ = [
    "UNDECODABLE",
    "DedupKind",
    "DedupQueue",
    "KeylessCause",
    "QueueOutcome",
    "_json_value",
    "decode_json",
    "undecodable",
]


class QueueOutcome(StrEnum):
    """What an enqueue did (``office.enqueue_result.outcome``)."""

    QUEUED = "queued"
    DEDUPED = "deduped"
    COALESCED = "coalesced"
    GUARDED = "guarded"  # the loop guard refused it (docs/api.md §9): no run, no key


class DedupKind(StrEnum):
    """How a ``deduped`` outcome was decided: the windowed lookup or the
    durable unique index."""

    WINDOWED = "windowed"
    DURABLE = "durable"


class DedupQueue(StrEnum):
    """The queue a dedup happened on (the ``queue`` label)."""

    RUNS = "runs"
    WAKEUP = "wakeup"


class KeylessCause(StrEnum):
    """Why a producer enqueues without a key (docs/domain.md §2.5)."""

    UNRESOLVED = "unresolved"
    BY_DESIGN = "by_design"


#: The one key of what :func:`decode_json` gives for a document it cannot decode.
UNDECODABLE = "office.undecodable"


def decode_json(data: str | bytes) -> Any:
    """``json.loads``, except for a document nested too deep for Python's
    decoder (``RecursionError``, near 1,000 levels; rows written before 0.5.0
    bounded the depth at 64 can be that deep): it becomes ``{UNDECODABLE:
    why}``, so the row is still read and what reads it refuses it (a worker
    fails the run once, the dashboard says it cannot display it) instead of
    the fetch failing at every try. Both drivers decode jsonb with it."""
    try:
        return json.loads(data)
    except RecursionError:
        return {UNDECODABLE: f"a JSON document of {len(data)} bytes nested too deep to decode"}


def undecodable(value: Any) -> str | None:
    """Why ``value`` could not be decoded (:func:`decode_json`), or None."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(UNDECODABLE), str):
        return str(value[UNDECODABLE])
    return None


def _json_value(value: Any) -> Any:
    """asyncpg hands ``jsonb`` over as text; psycopg already decodes it."""
    return decode_json(value) if isinstance(value, str) else value
