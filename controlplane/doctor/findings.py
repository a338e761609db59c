"""What a doctor check yields, and how it runs its named queries
(:mod:`controlplane.client.queries`, ``DOCTOR_*``) on its connection."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from controlplane.client.queries import Query

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


def rows(
    conn: psycopg.Connection[Any], query: Query, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of one named query on the doctor's own connection (one
    session: the settings it reports are that session's)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query.text, params or {})
        return cur.fetchall()


def one(
    conn: psycopg.Connection[Any], query: Query, params: Mapping[str, Any] | None = None
) -> Any:
    """The ``value`` of the first row (None without a row)."""
    found = rows(conn, query, params)
    return found[0]["value"] if found else None
