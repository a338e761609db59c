"""What a doctor check yields, and how it runs its named queries
(:mod:`controlplane.client.queries.doctor`) on its connection."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict

from controlplane.client.queries import Query
from controlplane.client.sync import fetch_rows

__all__ = ["Finding", "Status", "one", "rows"]


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    check: str
    status: Status
    detail: str
    fix: str = ""
    #: The shard of a proxy the finding is about (None: the DSN's database,
    #: or the cluster as a whole).
    shard: str | None = None


#: The rows of one named query on the doctor's own connection (one session:
#: the settings it reports are that session's).
rows = fetch_rows


def one(
    conn: psycopg.Connection[Any], query: Query, params: Mapping[str, Any] | None = None
) -> Any:
    """The ``value`` of the first row (None without a row)."""
    found = rows(conn, query, params)
    return found[0]["value"] if found else None
