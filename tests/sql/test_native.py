"""The native helpers (sql/office.c, bound by sql/95_native.sql) behave as
their PL/pgSQL definitions do. ``make test`` runs this suite on PostgreSQL 15,
where ``make install`` builds the library, and on the embedded PostgreSQL 18,
which has none: so every vector here, and every other test that writes
office.runs or makes an id, checks both definitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]

NATIVE = ["_check_short_text", "_ready_agents", "_run_row_valid", "_signal_runs", "_uuid_v7"]

# (status, reason, payload, idempotency_key) -> the CHECK's three-valued result
ROW_VECTORS: list[tuple[str | None, str | None, Any, str | None, bool | None]] = [
    *[(s, "r", {}, None, True) for s in ("queued", "claimed", "finished", "failed", "cancelled")],
    ("Queued", "r", {}, None, False),
    ("queued ", "r", {}, None, False),
    ("", "r", {}, None, False),
    (None, "r", {}, None, None),
    ("queued", "", {}, None, False),
    ("queued", None, {}, None, None),
    ("queued", "r", {"a": [1, 2]}, None, True),
    ("queued", "r", [], None, False),
    ("queued", "r", 1, None, False),
    ("queued", "r", "object", None, False),
    ("queued", "r", Jsonb(None), None, False),  # the JSON null, not SQL NULL
    ("queued", "r", None, None, None),
    ("queued", "r", {}, "", False),
    ("queued", "r", {}, "k", True),
    ("queued", "r", {}, "x" * 512, True),
    ("queued", "r", {}, "x" * 513, False),
    ("queued", "r", {}, "é" * 512, True),  # 1,024 bytes, 512 characters
    ("queued", "r", {}, "é" * 513, False),
    (None, "r", {}, "", False),  # false wins over NULL, as AND does
    (None, None, None, None, None),
]


@pytest.mark.parametrize(("status", "reason", "payload", "key", "valid"), ROW_VECTORS)
def test_the_runs_check_function_gives_the_three_valued_result(
    db: Conn,
    status: str | None,
    reason: str | None,
    payload: Any,
    key: str | None,
    valid: bool | None,
) -> None:
    value = payload if payload is None or isinstance(payload, Jsonb) else Jsonb(payload)
    row = db.execute(
        "SELECT office._run_row_valid(%s, %s, %s::jsonb, %s)", [status, reason, value, key]
    ).fetchone()
    assert row == (valid,)


def test_the_runs_check_function_reads_a_compressed_payload(db: Conn) -> None:
    # A stored value past the toast threshold is compressed: the native
    # definition reads only its header.
    db.execute(
        "CREATE TEMP TABLE big AS SELECT jsonb_build_object('a', repeat('x', 300000)) AS o,"
        " jsonb_build_array(repeat('x', 300000)) AS a"
    )
    row = db.execute(
        "SELECT pg_column_compression(o) IS NOT NULL,"
        " office._run_row_valid('queued', 'r', o, NULL),"
        " office._run_row_valid('queued', 'r', a, NULL)"
        " FROM big"
    ).fetchone()
    assert row == (True, True, False)


def test_the_native_definitions_are_bound_exactly_where_the_library_is_installed(db: Conn) -> None:
    libdir = db.execute("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'").fetchone()
    assert libdir is not None
    installed = (Path(libdir[0]) / "office.so").exists()
    bound = db.execute(
        "SELECT p.proname, l.lanname, p.proconfig FROM pg_proc p"
        " JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = 'office'::regnamespace AND p.proname = ANY (%s)"
        " ORDER BY p.proname",
        [NATIVE],
    ).fetchall()
    assert [name for name, _, _ in bound] == NATIVE
    for _, language, settings in bound:
        if installed:
            assert (language, settings) == ("c", None)
        else:
            assert language == "plpgsql" and "search_path=pg_catalog, pg_temp" in settings
    # Wherever bound, nothing else is native.
    others = db.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = 'office'::regnamespace AND l.lanname = 'c'"
        " AND p.proname <> ALL (%s)",
        [NATIVE],
    ).fetchall()
    assert others == []
