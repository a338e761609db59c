"""The native definitions (sql/native/, bound by sql/95_native.sql) behave as
their PL/pgSQL definitions do. ``make test`` runs this suite on PostgreSQL 15,
where ``make install`` builds the library, and on the embedded PostgreSQL 18,
which has none: so every vector here, and every other test that writes
office.runs or makes an id, checks both definitions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from controlplane import schema
from controlplane.migrate import migrate
from tests import harness
from tests.scenarios.hostile import HOSTILE_OBJECTS, HOSTILE_PATH
from tools import reference

Conn = psycopg.Connection[Any]

# These tests look at the binding the install made; a PL/pgSQL-only run
# (OFFICE_TEST_DEFINITIONS=plpgsql) has replaced it in every test database.
pytestmark = pytest.mark.skipif(
    harness.PLPGSQL_ONLY, reason="PL/pgSQL-only run: the install's native binding was replaced"
)

NATIVE = [
    "_check_short_text",
    "_count_dedup",
    "_ready_agents",
    "_run_row_valid",
    "_signal_runs",
    "_uuid_v7",
    "claim_run",
    "enqueue_run",
    "finish_run",
]

# The PL/pgSQL definitions 95_native.sql keeps where a C one hands calls on:
# (copy, signature, the function it copies, its SET clauses)
COPIES = [
    (
        "_claim_run_plpgsql",
        "text, text",
        "claim_run",
        ["search_path=pg_catalog, pg_temp", "enable_seqscan=off", "enable_bitmapscan=off"],
    ),
    (
        "_enqueue_run_plpgsql",
        "text, text, jsonb, text, text, boolean, text, text, text, text, integer, timestamptz",
        "enqueue_run",
        ["search_path=pg_catalog, pg_temp", "enable_seqscan=off"],
    ),
]

# (status, reason, payload, idempotency_key, origin, chain_depth, priority)
# -> the CHECK's three-valued result
RowVector = tuple[
    str | None, str | None, Any, str | None, str | None, int | None, int | None, bool | None
]
_FOUR_COLUMNS: list[tuple[str | None, str | None, Any, str | None, bool | None]] = [
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
ROW_VECTORS: list[RowVector] = [
    *[(s, r, p, k, "system", 0, 0, v) for s, r, p, k, v in _FOUR_COLUMNS],
    *[("queued", "r", {}, None, o, 0, 0, True) for o in ("human", "agent", "system")],
    ("queued", "r", {}, None, "Human", 0, 0, False),
    ("queued", "r", {}, None, "", 0, 0, False),
    ("queued", "r", {}, None, None, 0, 0, None),
    ("queued", "r", {}, None, "agent", 20, 0, True),
    ("queued", "r", {}, None, "agent", -1, 0, False),
    ("queued", "r", {}, None, "agent", None, 0, None),
    ("queued", "r", {}, None, "human", 0, 100, True),
    ("queued", "r", {}, None, "human", 0, -100, True),
    ("queued", "r", {}, None, "human", 0, 101, False),
    ("queued", "r", {}, None, "human", 0, -101, False),
    ("queued", "r", {}, None, "human", 0, 2**31 - 1, False),
    ("queued", "r", {}, None, "human", 0, -(2**31), False),
    ("queued", "r", {}, None, "human", 0, None, None),
    (None, "r", {}, None, "human", -1, 0, False),  # false wins over NULL
    ("queued", "r", {}, None, None, None, 101, False),
    (None, None, None, None, None, None, None, None),
]


@pytest.mark.parametrize(
    ("status", "reason", "payload", "key", "origin", "depth", "priority", "valid"), ROW_VECTORS
)
def test_the_runs_check_function_gives_the_three_valued_result(
    db: Conn,
    status: str | None,
    reason: str | None,
    payload: Any,
    key: str | None,
    origin: str | None,
    depth: int | None,
    priority: int | None,
    valid: bool | None,
) -> None:
    value = payload if payload is None or isinstance(payload, Jsonb) else Jsonb(payload)
    row = db.execute(
        "SELECT office._run_row_valid(%s, %s, %s::jsonb, %s, %s, %s::int, %s::int)",
        [status, reason, value, key, origin, depth, priority],
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
        " office._run_row_valid('queued', 'r', o, NULL, 'system', 0, 0),"
        " office._run_row_valid('queued', 'r', a, NULL, 'system', 0, 0)"
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
    # The PL/pgSQL definitions, kept where the C ones hand calls to them
    for name, signature, original, settings in COPIES:
        copy = db.execute(
            "SELECT p.prosrc, p.prosecdef, p.proconfig FROM pg_proc p"
            " WHERE p.oid = to_regprocedure(%s)",
            [f"office.{name}({signature})"],
        ).fetchone()
        if installed:
            assert copy is not None, name
            assert copy[0] == reference.portable(original)[1]
            assert copy[1:] == (True, settings)
        else:
            assert copy is None, name
    # The handshake's record of it.
    version = schema.current_version()
    said = harness.scalar(db, "SELECT office._native_binding()")
    if installed:
        assert said == f"native: library {version} = schema {version}"
    else:
        assert said == "PL/pgSQL only: the office library is not installed on this server"


def test_the_library_abi_version_is_the_control_file_version(db: Conn) -> None:
    # sql/Makefile passes office.control's default_version to native/abi.c:
    # the handshake compares it with office.schema_version().
    libdir = harness.scalar(db, "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
    if not (Path(libdir) / "office.so").exists():
        pytest.skip("no office library on this server")
    db.execute(
        "CREATE FUNCTION pg_temp.abi() RETURNS text LANGUAGE c STRICT"
        " AS '$libdir/office', 'office_abi_version'"
    )
    assert harness.scalar(db, "SELECT pg_temp.abi()") == schema.current_version()
    assert harness.scalar(db, "SELECT office.schema_version()") == schema.current_version()


def test_a_library_of_another_version_keeps_the_plpgsql_definitions_with_a_warning() -> None:
    # The handshake's refusal: the install script of this checkout, run as a
    # superuser, but with its schema_version() saying another version than
    # the library's ABI version (what a stale office.so against new scripts
    # looks like from the install's side). The bind block must warn, naming
    # both versions, and change nothing: the PL/pgSQL definitions serve.
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        libdir = harness.scalar(admin, "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
    if not (Path(libdir) / "office.so").exists():
        pytest.skip("no office library on this server")
    version = schema.current_version()
    stale = "0.0.1"
    script = schema.plain_sql(schema.install_script())
    pinned = f"    RETURN '{version}';"
    assert script.count(pinned) == 1, "schema_version()'s body moved: update this test"
    script = script.replace(pinned, f"    RETURN '{stale}';")
    dbname = f"office_native_stale_{harness.LABEL}"
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(dbname))
        )
    try:
        with psycopg.connect(harness.conninfo(dbname), autocommit=True) as conn:
            warnings: list[str] = []
            conn.add_notice_handler(
                lambda notice: (
                    warnings.append(str(notice.message_primary))
                    if notice.severity_nonlocalized == "WARNING"
                    else None
                )
            )
            conn.execute(script.encode())
            said = f"PL/pgSQL only: the office library is version {version}, the schema {stale}"
            assert warnings == [f"office: {said}"]
            assert harness.scalar(conn, "SELECT office._native_binding()") == said
            languages = conn.execute(
                "SELECT p.proname, l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
                " WHERE p.pronamespace = 'office'::regnamespace"
                " AND (p.proname = ANY (%s) OR l.lanname = 'c') ORDER BY p.proname",
                [NATIVE],
            ).fetchall()
            assert languages == [(name, "plpgsql") for name in NATIVE]
    finally:
        with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )


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
    # origin, cause_run_id, priority, not_before (docs/api.md §9)
    (("a1", "lin1", {}, "k15", None, False, None, None, "system", "", 0, None), {}),
    (("a1", "lin2", {}, "k16", None, False, None, None, "agent", None, None, None), {}),
    (("a1", "lin3", {}, "k17", None, False, None, None, "human", "r-gone", 5, None), {}),
    (("a1", "lin4", {}, None, None, False, None, None, None, "r-gone", None, None), {}),
    (("a1", "lin5", {}, None, None, False, None, None, "System", None, None, None), {}),
    (("a1", "lin5", {}, None, None, False, None, None, None, None, 101, None), {}),
    (("a1", "lin5", {}, None, None, False, None, None, None, None, None, "infinity"), {}),
    (("a2", "lin6", {}, "k18", None, False, None, None, None, None, -3, "2100-01-01Z"), {}),
    (("a2", "lin7", {}, "k19", None, False, None, None, None, None, None, "2000-01-01Z"), {}),
    (
        ("a1", "lin8", {}, None, None, False, None, None, "agent", None, None, None),
        {"office.max_chain_depth": "many"},
    ),
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
        values += [None] * (12 - len(values))
        try:
            row = db.execute(
                f"SELECT r.outcome, r.dedup_kind, r.run_id FROM office.{function}"
                "(%s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s::timestamptz) r",
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
        " task_id, entry_triggered, origin, cause_run_id, chain_depth, priority,"
        " scheduled_retry_at IS NOT NULL FROM office.runs ORDER BY id"
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
            for name, _, _, _ in COPIES:
                assert harness.scalar(conn, f"SELECT to_regproc('office.{name}')") is None
            assert harness.scalar(conn, "SELECT office._native_binding()") == (
                "PL/pgSQL only: the installing role may not create C functions (not a superuser)"
            )
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


# claim_run: the C definition follows the PL/pgSQL one step for step and
# hands it only a worker_id it refuses. The same claims through either, from
# the same state, with another session holding an agent's claim lock or a
# candidate row, must hand out the same runs, raise the same errors and leave
# the same readiness rows.
def _claim_calls(db: Conn, other: Conn, function: str, path: str | None = None) -> list[Any]:
    db.execute("TRUNCATE office.runs, office.run_keys_recorded, office.agent_ready CASCADE")
    agents = [f"c{n}" for n in range(1, 13)]
    db.execute("SELECT office.set_agent_status(a, 'idle') FROM unnest(%s::text[]) a", [agents])
    db.execute("SELECT office.set_agent_status('paused', 'paused')")
    # Two runs for each agent, requested in a known order; c11's wait on a
    # retry due in an hour, c12's on one that was due a minute ago.
    db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, requested_at, scheduled_retry_at)"
        " SELECT a, a || '-r' || k, now() - interval '1 hour' + (n * 2 + k) * interval '1 s',"
        "        CASE a WHEN 'c11' THEN now() + interval '1 hour'"
        "               WHEN 'c12' THEN now() - interval '1 minute' END"
        "   FROM unnest(%s::text[]) WITH ORDINALITY AS u(a, n), generate_series(1, 2) k",
        [agents],
    )
    db.execute("INSERT INTO office.runs (agent_profile_id, reason) VALUES ('paused', 'paused-r1')")
    # Stale rows: an agent with no run, one that does not exist.
    db.execute(
        "INSERT INTO office.agent_ready (agent_profile_id, head_at)"
        " VALUES ('c0', now() - interval '2 hours'), ('nobody', now() - interval '3 hours')"
    )
    seen: list[Any] = []

    def claim(*arguments: Any) -> None:
        if path is not None:
            db.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        try:
            rows = db.execute(
                f"SELECT agent_profile_id, reason, status, attempt, claimed_by"
                f" FROM office.{function}(%s, %s)",
                list(arguments),
            ).fetchall()
            outcome: Any = rows
        except psycopg.Error as error:
            outcome = (error.sqlstate, error.diag.message_primary)
        if path is not None:
            db.execute("RESET search_path")
        ready = db.execute(
            "SELECT agent_profile_id, due_at IS NULL, count(*) FROM office.agent_ready"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        seen.append((arguments, outcome, ready))

    def finish(agent: str) -> None:
        # finish_run is C too: under the path as well (hence the qualified
        # operators of this query)
        if path is not None:
            db.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        finished = db.execute(
            "SELECT office.finish_run(r.id, r.attempt) FROM office.runs r"
            " WHERE r.agent_profile_id OPERATOR(pg_catalog.=) %s"
            " AND r.status OPERATOR(pg_catalog.=) 'claimed'",
            [agent],
        ).fetchall()
        if path is not None:
            db.execute("RESET search_path")
        seen.append(("finish", agent, finished))

    claim("w1", None)  # the oldest: c1's, past the stale rows
    claim("w2", "c1")  # c1 holds a claim
    claim("w3", "")  # '' is no agent
    claim(None, None)
    claim("bad\x01", None)
    claim("x" * 201, None)
    claim("w", "paused")
    claim("w", "nobody")
    claim("w", "c11")  # nothing due
    claim("w", "c12")  # due again
    # another session holds c2's claim lock, then c3's oldest row
    with other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended('office.runs.claim:c2', 0))")
        claim("w4", None)
        claim("w5", "c2")
    with other.transaction():
        other.execute("SELECT 1 FROM office.runs WHERE reason = 'c4-r1' FOR UPDATE")
        claim("w6", None)
        claim("w7", "c4")
    for agent in ("c1", "c2", "c3"):
        finish(agent)
    for n in range(14):
        claim(f"loop-{n}", None)
    db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    finish("c5")
    claim("rr", None)
    db.execute("COMMIT")
    claim("last", None)
    seen.append(
        db.execute(
            "SELECT agent_profile_id, reason, status, attempt, claimed_by, claimed_at IS NULL,"
            " heartbeat_at IS NULL FROM office.runs ORDER BY reason"
        ).fetchall()
    )
    return seen


@pytest.fixture
def other(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def test_claim_run_claims_as_its_plpgsql_definition(db: Conn, other: Conn) -> None:
    if db.execute("SELECT to_regproc('office._claim_run_plpgsql')").fetchone() == (None,):
        pytest.skip("the PL/pgSQL definition is office.claim_run itself here (no library)")
    agents = ["paused", *(f"c{n}" for n in range(13))]
    db.execute("SELECT office.upsert_agent(a, 'w') FROM unnest(%s::text[]) a", [agents])
    native = _claim_calls(db, other, "claim_run")
    portable = _claim_calls(db, other, "_claim_run_plpgsql")
    assert native == portable
    # Not vacuous: runs handed out, calls that get none, both errors, and
    # readiness rows removed and delayed.
    outcomes = [o for c, o, _ in native[:-1] if c != "finish"]
    assert sum(1 for o in outcomes if isinstance(o, list) and o) >= 12
    assert sum(1 for o in outcomes if o == []) >= 5
    assert sum(1 for o in outcomes if isinstance(o, tuple) and o[0] == "22023") == 2
    assert any(("c11", False, 1) in ready for c, _, ready in native[:-1] if c != "finish")
    assert all(agent not in ("c0", "nobody") for agent, _, _ in native[0][2])
    assert sum(f == [(True,)] for c, _, f in native[:-1] if c == "finish") >= 3


def test_claim_run_claims_the_same_under_a_hostile_search_path(db: Conn, other: Conn) -> None:
    db.execute(HOSTILE_OBJECTS)
    agents = ["paused", *(f"c{n}" for n in range(13))]
    db.execute("SELECT office.upsert_agent(a, 'w') FROM unnest(%s::text[]) a", [agents])
    # (only the claims run under it: the scenario's own SQL uses || and -)
    normal = _claim_calls(db, other, "claim_run")
    shadowed = _claim_calls(db, other, "claim_run", HOSTILE_PATH)
    assert shadowed == normal


def test_a_session_opens_the_relations_of_office_installed_again(empty_database: str) -> None:
    # The native definitions keep the office relations' OIDs for the
    # session: office dropped and installed again (new OIDs, the schema kept)
    # must not leave them looking for the old ones.
    with psycopg.connect(empty_database, autocommit=True) as conn:
        for _ in range(2):
            conn.execute("CREATE EXTENSION office")
            conn.execute("SELECT office.upsert_agent('a1', 'w1')")
            row = conn.execute("SELECT outcome FROM office.enqueue_run('a1', 'r', '{}', 'k')")
            assert row.fetchone() == ("queued",)
            claimed = conn.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
            assert claimed is not None
            assert conn.execute("SELECT office.finish_run(%s, %s)", claimed).fetchone() == (True,)
            conn.execute("DROP EXTENSION office")
