"""The native definitions against their PL/pgSQL ones, on one server, over
generated call sequences (hypothesis).

Two databases of the same server get office: in one the C definitions serve
(sql/95_native.sql bound them), in the other every native function is bound
back to its PL/pgSQL definition from the capability files (CREATE OR REPLACE:
the triggers keep pointing at it). The same sequence of enqueue, bulk
enqueue, claim, heartbeat, finish, fail, retry, cancel, requeue, recovery,
pause/resume and window settings runs on both, call by call. Every answer
(its result, or its SQLSTATE and message, and the NOTIFYs it sent: channel
and payload, in order, both databases listening on every channel office
notifies on) and then every observable row (runs, recorded keys, dedup
counters, the readiness table's agents) must be the same, run ids compared
by order of appearance. office.notify is among the settings drawn. Where the library is not
installed (the embedded PostgreSQL 18), or in a PL/pgSQL-only run
(``OFFICE_TEST_DEFINITIONS=plpgsql``), both would be PL/pgSQL: skipped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from controlplane import schema
from tests import harness
from tools import reference

Conn = psycopg.Connection[Any]

AGENTS = ("a1", "a2", "a3")
NATIVE_DIR = schema.sql_dir() / "native"
KEYS = (None, "k1", "k2", "k3", "task_comment:c1:a1")

_enqueue = st.tuples(
    st.just("enqueue"),
    st.sampled_from(AGENTS),
    st.sampled_from(("r1", "r2")),
    st.sampled_from(KEYS),
    st.sampled_from((None, "t1")),
    st.booleans(),
    # docs/api.md §9: what the C definition hands on (and what it decides)
    st.sampled_from((0, 0, 0, 5, -3)),  # priority
    st.sampled_from((None, None, "human", "agent")),  # origin
    st.sampled_from((False, False, True)),  # not_before an hour ahead
)
_bulk = st.tuples(
    st.just("enqueue_runs"),
    st.lists(st.tuples(st.sampled_from(AGENTS), st.sampled_from(KEYS), st.booleans()), max_size=3),
)
_claim = st.tuples(
    st.just("claim"), st.sampled_from(("w1", "w2")), st.sampled_from((None, *AGENTS))
)
_outcome = st.tuples(
    st.sampled_from(
        ("heartbeat", "finish", "fail", "fail_retryable", "retry", "cancel", "requeue")
    ),
    st.integers(0, 7),  # which run, by order of appearance
    st.sampled_from((0, 0, 0, 1)),  # 1: a stale attempt
    st.sampled_from((None, "w1", "w2")),
)
_other = st.one_of(
    st.tuples(st.just("recover")),
    st.tuples(st.just("status"), st.sampled_from(AGENTS), st.sampled_from(("active", "paused"))),
    st.tuples(
        st.just("setting"),
        st.sampled_from(("office.coalesce_window", "office.idempotency_window")),
        st.sampled_from(("", "0", "1 hour")),
    ),
    st.tuples(
        st.just("setting"), st.just("office.notify"), st.sampled_from(("", "every", "off", "on"))
    ),
    # A policy that holds runs (claim_run hands on while one exists) or none.
    st.tuples(
        st.just("policy"),
        st.sampled_from(AGENTS),
        st.sampled_from(("cooldown", "budget", "run_cap", "clear")),
    ),
)
# Weighted towards what the native paths decide: enqueues, claims, and the
# ends of claims (hypothesis draws one_of's branches evenly).
OPERATIONS = st.lists(
    st.one_of(
        _enqueue,
        _enqueue,
        _enqueue,
        _bulk,
        _claim,
        _claim,
        _claim,
        _outcome,
        _outcome,
        _outcome,
        _other,
    ),
    min_size=8,
    max_size=40,
)


def _channels() -> list[str]:
    """Every channel office notifies on: the pg_notify calls of the capability
    files; the C definitions notify on none of their own."""
    sql_channels = {
        channel
        for path in schema.capability_files()
        for channel in re.findall(r"pg_notify\('(\w+)'", path.read_text("utf-8"))
    }
    c_channels = {
        channel
        for path in NATIVE_DIR.glob("*.c")
        for channel in re.findall(r'Async_Notify\("(\w+)"', path.read_text("utf-8"))
    }
    assert c_channels and c_channels <= sql_channels, (c_channels, sql_channels)
    return sorted(sql_channels)


@dataclass
class Side:
    conn: Conn
    runs: list[str] = field(default_factory=list)  # run ids by order of appearance
    notified: list[tuple[str, str]] = field(default_factory=list)  # since the last take

    def __post_init__(self) -> None:
        # psycopg calls the handler for each notification as it reads the
        # statement's result: a call's NOTIFYs (autocommit: sent at its
        # commit, to this listening session too) are all here when it returns.
        self.conn.add_notify_handler(lambda n: self.notified.append((n.channel, n.payload)))
        for channel in _channels():
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def take_notified(self) -> list[tuple[str, str]]:
        taken = [(channel, self.normal(payload)) for channel, payload in self.notified]
        self.notified.clear()
        return taken

    def token(self, run_id: Any) -> Any:
        if not isinstance(run_id, str):
            return run_id
        if run_id not in self.runs:
            self.runs.append(run_id)
        return f"run#{self.runs.index(run_id)}"

    def normal(self, text: str) -> str:
        for n, run_id in enumerate(self.runs):
            text = text.replace(run_id, f"run#{n}")
        return text


def _reset(side: Side) -> None:
    conn = side.conn
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'office'::regnamespace"
            " AND c.relkind = 'r' ORDER BY 1"
        )
    ]
    conn.execute(
        sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
            sql.SQL(", ").join(sql.Identifier("office", t) for t in tables)
        )
    )
    conn.execute("RESET ALL")
    for agent in AGENTS:
        conn.execute("SELECT office.upsert_agent(%s, 'w')", (agent,))
    side.runs.clear()
    side.notified.clear()


def _call(side: Side, op: tuple[Any, ...]) -> Any:
    conn, kind = side.conn, op[0]
    if kind == "enqueue":
        _, agent, reason, key, task, entry, priority, origin, later = op
        row = conn.execute(
            "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run(%s, %s, %s, %s, %s, %s,"
            " origin => %s, priority => %s,"
            " not_before => CASE WHEN %s THEN now() + interval '1 hour' END)",
            (agent, reason, Jsonb({"n": 1}), key, task, entry, origin, priority, later),
        ).fetchone()
        assert row is not None
        return (row[0], row[1], side.token(row[2]))
    if kind == "enqueue_runs":
        elements = [
            {"agent_profile_id": a, "reason": "r1", "idempotency_key": k, "entry_triggered": e}
            for a, k, e in op[1]
        ]
        rows = conn.execute(
            "SELECT ordinality, outcome, dedup_kind, run_id FROM office.enqueue_runs(%s)"
            " ORDER BY ordinality",
            (Jsonb(elements),),
        ).fetchall()
        return [(o, out, dk, side.token(r)) for o, out, dk, r in rows]
    if kind == "claim":
        rows = conn.execute(
            "SELECT id, attempt, status, claimed_by FROM office.claim_run(%s, %s)", (op[1], op[2])
        ).fetchall()
        return [(side.token(i), a, s, w) for i, a, s, w in rows]
    if kind in ("heartbeat", "finish", "fail", "fail_retryable", "retry", "cancel", "requeue"):
        _, which, stale, worker = op
        if not side.runs:
            return None
        run_id = side.runs[which % len(side.runs)]
        attempt = harness.scalar(conn, "SELECT attempt FROM office.runs WHERE id = %s", (run_id,))
        attempt = (attempt or 0) - stale
        calls = {
            "heartbeat": ("SELECT office.heartbeat_run(%s, %s, %s)", (run_id, attempt, worker)),
            "finish": ("SELECT office.finish_run(%s, %s, %s)", (run_id, attempt, worker)),
            "fail": ("SELECT office.fail_run(%s, %s, 'e', false, %s)", (run_id, attempt, worker)),
            "fail_retryable": (
                "SELECT office.fail_run(%s, %s, 'e', true, %s)",
                (run_id, attempt, worker),
            ),
            "retry": ("SELECT office.retry_run(%s, %s, '0', %s)", (run_id, attempt, worker)),
            "cancel": ("SELECT office.cancel_run(%s, 'stop')", (run_id,)),
            "requeue": ("SELECT office.requeue_run(%s)", (run_id,)),
        }
        query, params = calls[kind]
        return harness.scalar(conn, query, params)
    if kind == "recover":
        rows = conn.execute("SELECT * FROM office.recover_stale_runs('0')").fetchall()
        return sorted(repr(tuple(side.token(v) for v in row)) for row in rows)
    if kind == "status":
        return harness.scalar(conn, "SELECT office.set_agent_status(%s, %s) IS NOT NULL", op[1:])
    if kind == "policy":
        _, agent, limit = op
        if limit == "clear":
            return harness.scalar(conn, "SELECT office.clear_wake_policy('agent', %s)", (agent,))
        args = {
            "cooldown": "cooldown => '1 hour'",
            "budget": "budget => 0",
            "run_cap": "max_runs => 1, per => '1 hour'",
        }[limit]
        conn.execute(f"SELECT office.set_wake_policy('agent', %s, {args})", (agent,))
        return None
    if kind == "setting":
        _, name, value = op
        if value:
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        else:
            conn.execute(sql.SQL("RESET {}").format(sql.Identifier(name)))
        return None
    raise AssertionError(op)


def _answer(side: Side, op: tuple[Any, ...]) -> Any:
    """The call's result or error, and the NOTIFYs it sent (channel, payload)."""
    try:
        answer: Any = ("ok", _call(side, op))
    except psycopg.Error as exc:
        answer = ("error", exc.sqlstate, side.normal(str(exc.diag.message_primary)))
    return (*answer, side.take_notified())


def _state(side: Side) -> Any:
    conn = side.conn
    runs = sorted(
        (side.token(r[0]), *r[1:])
        for r in conn.execute(
            "SELECT id, agent_profile_id, reason, status, attempt, idempotency_key, task_id,"
            " entry_triggered, coalesced_count, retry_count, claimed_by,"
            " scheduled_retry_at IS NOT NULL, error_message, origin, chain_depth, priority"
            " FROM office.runs"
        )
    )
    keys = sorted(
        (k, side.token(r))
        for k, r in conn.execute("SELECT idempotency_key, run_id FROM office.run_keys_recorded")
    )
    counters = sorted(conn.execute("SELECT * FROM office.dedup_stats").fetchall())
    ready = sorted(r[0] for r in conn.execute("SELECT agent_profile_id FROM office.agent_ready"))
    return {"runs": runs, "keys": keys, "counters": counters, "ready": ready}


@pytest.fixture(scope="module")
def sides() -> Iterator[tuple[Side, Side]]:
    names = [f"office_diff_{kind}_{harness.LABEL}" for kind in ("native", "plpgsql")]
    if harness.PLPGSQL_ONLY:
        pytest.skip("PL/pgSQL only run: both definitions would be PL/pgSQL")
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
        libdir = harness.scalar(admin, "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
        if not (Path(libdir) / "office.so").exists():
            pytest.skip("no office library on this server: both definitions would be PL/pgSQL")
        for name in names:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name))
            )
    conns = [psycopg.connect(harness.conninfo(name), autocommit=True) for name in names]
    try:
        for conn in conns:
            conn.execute("CREATE EXTENSION office")
        harness.bind_plpgsql(conns[1])
        yield Side(conns[0]), Side(conns[1])
    finally:
        for conn in conns:
            conn.close()
        with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as admin:
            for name in names:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


def test_the_plpgsql_side_has_no_native_definition_left(sides: tuple[Side, Side]) -> None:
    native, plpgsql = sides
    count = harness.C_FUNCTIONS
    assert harness.scalar(native.conn, count) == len(reference.natives_and_copies()[0])
    assert harness.scalar(plpgsql.conn, count) == 0


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=OPERATIONS)
def test_native_and_plpgsql_answer_every_sequence_alike(
    sides: tuple[Side, Side], operations: list[tuple[Any, ...]]
) -> None:
    native, plpgsql = sides
    for side in sides:
        _reset(side)
    for step, op in enumerate(operations):
        answers = (_answer(native, op), _answer(plpgsql, op))
        assert answers[0] == answers[1], (step, op, operations[: step + 1])
    assert _state(native) == _state(plpgsql), operations
