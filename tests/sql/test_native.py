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
from psycopg import sql
from psycopg.types.json import Jsonb

from controlplane.migrate import migrate
from tests import harness
from tests.scenarios.hostile import HOSTILE_OBJECTS, HOSTILE_PATH
from tools import reference

Conn = psycopg.Connection[Any]

NATIVE = [
    "_check_short_text",
    "_count_dedup",
    "_ready_agents",
    "_run_row_valid",
    "_signal_runs",
    "_uuid_v7",
    "enqueue_run",
]

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
    # enqueue_run's PL/pgSQL definition, kept where the C one hands calls to it
    copy = db.execute(
        "SELECT p.prosrc, p.prosecdef, p.proconfig FROM pg_proc p"
        " WHERE p.oid = to_regprocedure('office._enqueue_run_plpgsql(text, text, jsonb, text, text,"
        " boolean, text, text)')"
    ).fetchone()
    if installed:
        assert copy is not None
        assert copy[0] == reference.portable("enqueue_run")[1]
        assert copy[1:] == (True, ["search_path=pg_catalog, pg_temp", "enable_seqscan=off"])
    else:
        assert copy is None


# enqueue_run: where the library is installed, its C definition decides the
# common calls and hands the rest to the PL/pgSQL one, kept as
# office._enqueue_run_plpgsql. The same calls through either, from the same
# state, must give the same outcomes, errors, rows, counts and signals.
# (setting, value) pairs are SET before the call and RESET after it.
Call = tuple[tuple[Any, ...], dict[str, str]]
LONG = "x" * 513
ENQUEUE_CALLS: list[Call] = [
    (("a1", "task_assigned", {"n": 1}, "k1", "t1", False, None, None), {}),
    (("a1", "task_assigned", {"n": 2}, "k1", "t1", False, None, None), {}),  # served key
    (("a1", "task_assigned", {"n": 3}, "k2", "t1", False, None, None), {}),  # coalesces
    (("a1", "task_assigned", {}, "k2", "t1", False, None, None), {}),  # recorded key
    (
        ("a1", "task_assigned", {}, "k2", "t1", False, None, None),
        {"office.idempotency_window": "0"},
    ),
    (("a1", "task_assigned", {}, "k3", "t1", False, None, None), {"office.coalesce_window": "0"}),
    (("a1", "task_assigned", {}, "k4", "t1", True, None, None), {}),  # entry-triggered
    (("a1", "task_assigned", {}, "task_comment:c1", "t1", False, None, None), {}),
    (("a1", "task_assigned", {}, "k5", "t1", False, None, None), {}),  # a comment run is no target
    (("a1", "routine", {}, None, None, False, None, None), {}),
    (("a1", "routine", {"agent_profile_id": "spoof"}, "", "", None, None, None), {}),
    (("a1", "routine", {}, None, None, False, "by_design", None), {}),
    (("a2", "routine", {}, "k6", None, False, None, None), {"office.notify": "every"}),
    (("a2", "routine", {}, "k7", "t2", False, None, None), {"office.notify": "off"}),
    (("a2", "routine", {}, "k8", "t3", False, None, None), {"office.notify": "bogus"}),
    (("a2", "routine", {}, "k9", "t4", False, None, None), {"office.coalesce_window": "forever"}),
    (("a2", "routine", {}, "k6", None, False, None, None), {"office.idempotency_window": "-1 day"}),
    (("a3", "after_finish", {}, "k10", "t5", False, None, None), {}),  # claimed, then finished
    (("a3", "after_finish", {}, "k11", "t5", False, None, None), {}),  # no target: a new run
    (("paused", "routine", {}, "k12", None, False, None, None), {}),
    (("nobody", "routine", {}, "k13", None, False, None, None), {}),
    ((None, "routine", {}, None, None, False, None, None), {}),
    (("", "routine", {}, None, None, False, None, None), {}),
    (("a1", None, {}, None, None, False, None, None), {}),
    (("a1", "line\nbreak", {}, None, None, False, None, None), {}),
    (("a1", "r" * 201, {}, None, None, False, None, None), {}),
    (("a1", "routine", {}, None, "t\x01", False, None, None), {}),
    (("a1", "routine", [1], None, None, False, None, None), {}),
    (("a1", "routine", None, None, None, False, None, None), {}),
    (("a1", "routine", {"big": "y" * 1048576}, None, None, False, None, None), {}),
    (("a1", "routine", {}, LONG, None, False, None, None), {}),
    (("a1", "routine", {}, "é" * 512, "t6", False, None, None), {}),
    (("a1", "routine", {}, None, None, False, "sometimes", None), {}),
    (("a1", "routine", {}, "k14", None, False, "unresolved", None), {}),
]


def _run_calls(db: Conn, function: str) -> list[Any]:
    db.execute(
        "TRUNCATE office.runs, office.run_keys_recorded, office.agent_ready,"
        " office.dedup_counters, office.keyless_counters CASCADE"
    )
    for agent, status in (("a1", "idle"), ("a2", "idle"), ("a3", "idle"), ("paused", "paused")):
        db.execute("SELECT office.set_agent_status(%s, %s)", [agent, status])
    signals: list[str] = []
    db.add_notify_handler(lambda n: signals.append(n.payload))
    db.execute("LISTEN office_runs")
    ids: dict[str, int] = {}
    seen: list[Any] = []
    for arguments, settings in ENQUEUE_CALLS:
        for name, value in settings.items():
            db.execute("SELECT set_config(%s, %s, false)", [name, value])
        values = [Jsonb(a) if isinstance(a, dict | list) else a for a in arguments]
        try:
            row = db.execute(
                f"SELECT r.outcome, r.dedup_kind, r.run_id FROM office.{function}"
                "(%s, %s, %s::jsonb, %s, %s, %s, %s, %s) r",
                values,
            ).fetchone()
            assert row is not None
            outcome: Any = (row[0], row[1], ids.setdefault(row[2], len(ids)))
        except psycopg.Error as error:
            outcome = (error.sqlstate, error.diag.message_primary)
        for name in settings:
            db.execute("SELECT set_config(%s, '', false)", [name])
        if arguments[1] == "after_finish" and arguments[3] == "k10":
            claimed = db.execute(
                "SELECT c.id, c.attempt FROM office.claim_run('w', 'a3') c"
            ).fetchone()
            assert claimed is not None
            db.execute("SELECT office.finish_run(%s, %s)", claimed)
        seen.append((outcome, list(signals)))
        signals.clear()
    db.execute("UNLISTEN office_runs")
    rows = db.execute(
        "SELECT id, agent_profile_id, reason, payload, status, coalesced_count, idempotency_key,"
        " task_id, entry_triggered FROM office.runs ORDER BY id"
    ).fetchall()
    seen.append([(ids.get(r[0]), *r[1:]) for r in rows])
    seen.append(
        [
            (k, ids.get(r))
            for k, r in db.execute(
                "SELECT idempotency_key, run_id FROM office.run_keys_recorded ORDER BY 1"
            )
        ]
    )
    seen.append(db.execute("SELECT * FROM office.dedup_stats ORDER BY 1, 2, 3").fetchall())
    seen.append(db.execute("SELECT * FROM office.keyless_stats ORDER BY 1, 2").fetchall())
    return seen


def test_enqueue_run_decides_as_its_plpgsql_definition(db: Conn) -> None:
    if db.execute("SELECT to_regproc('office._enqueue_run_plpgsql')").fetchone() == (None,):
        pytest.skip("the PL/pgSQL definition is office.enqueue_run itself here (no library)")
    db.execute(
        "SELECT office.upsert_agent(a, 'w') FROM unnest(ARRAY['a1', 'a2', 'a3', 'paused']) a"
    )
    native = _run_calls(db, "enqueue_run")
    portable = _run_calls(db, "_enqueue_run_plpgsql")
    assert native == portable
    # The calls reach every outcome and several errors, so the comparison is not vacuous.
    outcomes = {o[0] for o, _ in native[: len(ENQUEUE_CALLS)]}
    assert {"queued", "deduped", "coalesced", "22023", "OFA01", "OFA02"} <= outcomes


def test_enqueue_run_decides_the_same_under_a_hostile_search_path(db: Conn) -> None:
    # The C definition sets no search_path: its statements run under the
    # caller's, so every name and operator in them is qualified. Under a
    # path whose schema shadows =, <>, || and more (test_hardening.py), the
    # same calls give the same outcomes, rows and counts as under the default.
    db.execute(HOSTILE_OBJECTS)
    db.execute(
        "SELECT office.upsert_agent(a, 'w') FROM unnest(ARRAY['a1', 'a2', 'a3', 'paused']) a"
    )
    normal = _run_calls(db, "enqueue_run")
    db.execute(sql.SQL("SET search_path = {}").format(sql.SQL(HOSTILE_PATH)))
    try:
        shadowed = _run_calls(db, "enqueue_run")
    finally:
        db.execute("RESET search_path")
    assert shadowed == normal


def test_a_migrate_without_superuser_keeps_the_plpgsql_definitions() -> None:
    # 95_native.sql's fallback: a C function takes a superuser to create. A
    # database owner who is not one (with CREATEROLE, which office's roles
    # need) runs officectl migrate; the block meets insufficient_privilege
    # and changes nothing, and the PL/pgSQL definitions serve.
    owner = f"office_native_owner_{harness.LABEL}"
    dbname = f"office_native_{harness.LABEL}"

    def drop(admin: Conn) -> None:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(owner)))

    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        drop(admin)
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(owner)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(dbname), sql.Identifier(owner)
            )
        )
    try:
        migrate(f"postgresql://{owner}@{harness.HOST}:{harness.PORT}/{dbname}")
        with psycopg.connect(harness.conninfo(dbname), autocommit=True) as conn:
            languages = conn.execute(
                "SELECT p.proname, l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
                " WHERE p.pronamespace = 'office'::regnamespace"
                " AND (p.proname = ANY (%s) OR l.lanname = 'c') ORDER BY p.proname",
                [NATIVE],
            ).fetchall()
            assert languages == [(name, "plpgsql") for name in NATIVE]
            assert harness.scalar(conn, "SELECT to_regproc('office._enqueue_run_plpgsql')") is None
            conn.execute("SELECT office.upsert_agent('a1', 'w')")
            outcomes = [
                harness.scalar(
                    conn, "SELECT outcome FROM office.enqueue_run('a1', 'r', '{}', %s)", [k]
                )
                for k in ("k1", "k1", "k2")
            ]
            assert outcomes == ["queued", "deduped", "coalesced"]
    finally:
        with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
            drop(admin)
