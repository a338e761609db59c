"""Every jsonb the product stores nests at most 64 levels deep (docs/api.md,
Conventions): the functions refuse a deeper argument with 22023 naming it,
and rows the table owner writes directly are refused by the triggers (the
run queue's CHECK for office.runs) with 22023 too. 0.4.0 took 3,000 levels,
which Python's decoder cannot read back: the run was claimed, not decoded,
recovered and claimed again forever."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]


def nested(depth: int, *, arrays: bool = False) -> Any:
    """An object (or, inside it, arrays) nested ``depth`` levels deep, the
    top-level object being level 1."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if arrays else {f"k{level}": value}
    return {"top": value}


def nested_text(depth: int) -> str:
    return json.dumps(nested(depth))


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    return "a1"


def test_nested_builds_what_it_says() -> None:
    # The helper itself: 3 levels is {"top": {"k1": {"k0": 1}}}.
    assert nested(3) == {"top": {"k1": {"k0": 1}}}
    assert nested(3, arrays=True) == {"top": [[1]]}


@pytest.mark.parametrize("arrays", [False, True])
def test_the_depth_check_takes_64_levels_and_refuses_65(db: Conn, arrays: bool) -> None:
    ok = db.execute(
        "SELECT office._json_depth_ok(%s), office._json_depth_ok(%s), office._json_depth_ok(NULL)",
        [Jsonb(nested(64, arrays=arrays)), Jsonb(nested(65, arrays=arrays))],
    ).fetchone()
    assert ok == (True, False, None)


CALLS = [
    ("enqueue_run", "SELECT * FROM office.enqueue_run('a1', 'r', %s)", "payload"),
    (
        "enqueue_runs",
        "SELECT * FROM office.enqueue_runs(jsonb_build_array(jsonb_build_object("
        "'agent_profile_id', 'a1', 'reason', 'r', 'payload', %s::jsonb)))",
        "payload",
    ),
    ("request_wakeup", "SELECT * FROM office.request_wakeup('a1', 'user', 'r', %s)", "payload"),
    (
        "create_routine task_template",
        "SELECT office.create_routine('w1', 'n', task_template => %s)",
        "task_template",
    ),
    (
        "create_routine variables",
        "SELECT office.create_routine('w1', 'n', variables => %s)",
        "variables",
    ),
]


@pytest.mark.parametrize(("name", "statement", "argument"), CALLS, ids=[c[0] for c in CALLS])
def test_a_function_refuses_a_document_65_levels_deep_naming_it(
    db: Conn, agent: str, name: str, statement: str, argument: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        db.execute(statement, [Jsonb(nested(65))])
    # (enqueue_runs says which element: "enqueue_runs element 1: payload ...")
    assert f"{argument} nests more than 64 levels" in str(refused.value).splitlines()[0]
    # Nothing was written.
    counts = db.execute(
        "SELECT (SELECT count(*) FROM office.runs), (SELECT count(*) FROM office.wakeup_requests),"
        " (SELECT count(*) FROM office.routines)"
    ).fetchone()
    assert counts == (0, 0, 0)


@pytest.mark.parametrize(("name", "statement", "argument"), CALLS, ids=[c[0] for c in CALLS])
def test_a_function_takes_a_document_64_levels_deep(
    db: Conn, agent: str, name: str, statement: str, argument: str
) -> None:
    db.execute(statement, [Jsonb(nested(64))])


def test_dispatch_routine_refuses_deep_variables(db: Conn, agent: str) -> None:
    routine = db.execute(
        "SELECT id FROM office.create_routine('w1', 'n', assignee_agent_profile_id => 'a1')"
    ).fetchone()
    assert routine is not None
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^variables nests more"):
        db.execute(
            "SELECT office.dispatch_routine(%s, 'manual', %s)", [routine[0], Jsonb(nested(65))]
        )


OWNER_WRITES = [
    (
        "runs",
        "INSERT INTO office.runs (agent_profile_id, reason, payload) VALUES ('a1', 'r', %s)",
        "runs.payload",
    ),
    (
        "runs context_snapshot insert",
        "INSERT INTO office.runs (agent_profile_id, reason, context_snapshot)"
        " VALUES ('a1', 'r', %s)",
        "runs.context_snapshot",
    ),
    (
        "runs inserted finished",
        "INSERT INTO office.runs (agent_profile_id, reason, status, payload)"
        " VALUES ('a1', 'r', 'finished', %s)",
        "runs.payload",
    ),
    ("runs update", "UPDATE office.runs SET payload = %s", "runs.payload"),
    (
        "runs context_snapshot",
        "UPDATE office.runs SET context_snapshot = %s",
        "runs.context_snapshot",
    ),
    (
        "wakeup_requests",
        "INSERT INTO office.wakeup_requests (agent_profile_id, source, payload)"
        " VALUES ('a1', 'user', %s)",
        "payload",
    ),
    ("wakeup update", "UPDATE office.wakeup_requests SET payload = %s", "payload"),
    (
        "routines",
        "INSERT INTO office.routines (id, workspace_id, name, variables)"
        " VALUES ('R2', 'w1', 'n', %s)",
        "routines.variables",
    ),
    (
        "routine_runs",
        "INSERT INTO office.routine_runs (routine_id, source, trigger_payload)"
        " VALUES ('R1', 'manual', %s)",
        "routine_runs.trigger_payload",
    ),
    (
        "events",
        "INSERT INTO office.events (topic, payload) VALUES ('t', %s)",
        "events.payload",
    ),
]


@pytest.mark.parametrize(
    ("name", "statement", "argument"), OWNER_WRITES, ids=[w[0] for w in OWNER_WRITES]
)
def test_a_row_the_owner_writes_directly_is_checked_too(
    db: Conn, agent: str, name: str, statement: str, argument: str
) -> None:
    db.execute("SELECT * FROM office.enqueue_run('a1', 'seed')")
    db.execute("SELECT * FROM office.request_wakeup('a1', 'user', 'seed')")
    db.execute("SELECT office.create_routine('w1', 'n', id => 'R1')")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        db.execute(statement, [Jsonb(nested(65, arrays=True))])
    assert str(refused.value).startswith(f"{argument} nests more than 64 levels")
    # 64 levels is a row like any other.
    db.execute(statement, [Jsonb(nested(64, arrays=True))])


def test_a_run_inserted_directly_is_checked_when_stored_compressed(db: Conn, agent: str) -> None:
    # The readiness trigger sees the stored row, whose large values are
    # compressed: a deep payload that compresses below 512 bytes is still
    # walked (a check of the stored size alone would pass it).
    deep = Jsonb({"deep": nested(65, arrays=True), "filler": "x" * 4000})
    db.execute("CREATE TEMP TABLE stored (id int, payload jsonb)")
    db.execute("INSERT INTO stored VALUES (1, %s)", [deep])
    assert db.execute(
        "SELECT pg_column_size(payload) < 512, pg_column_compression(payload) IS NOT NULL"
        " FROM stored"
    ).fetchone() == (True, True)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^runs.payload nests more"):
        db.execute(
            "INSERT INTO office.runs (agent_profile_id, reason, payload)"
            " SELECT 'a1', 'r', payload FROM stored"
        )
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (0,)


def test_a_wakeup_row_the_owner_writes_meets_request_wakeups_bounds(db: Conn, agent: str) -> None:
    # 0.4.0: a 3,200-character reason written directly became a run's reason.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="more than 200"):
        db.execute(
            "INSERT INTO office.wakeup_requests (agent_profile_id, source, reason)"
            " VALUES ('a1', 'user', repeat('x', 3200))"
        )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="control character"):
        db.execute(
            "INSERT INTO office.wakeup_requests (agent_profile_id, source)"
            " VALUES ('a1', e'us\\ter')"
        )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="more than 1 MiB"):
        db.execute(
            "INSERT INTO office.wakeup_requests (agent_profile_id, source, payload)"
            " VALUES ('a1', 'user', jsonb_build_object('a', repeat('x', 1048577)))"
        )
    # A failure's text is a free text, not a short word.
    request = db.execute(
        "SELECT wakeup_request_id FROM office.request_wakeup('a1', 'user', 'r')"
    ).fetchone()
    assert request is not None
    assert db.execute(
        "SELECT office.fail_wakeup(%s, repeat('y', 3200))", [request[0]]
    ).fetchone() == (True,)


@pytest.mark.parametrize("depth", [64, 65])
def test_a_large_payload_is_walked_too(db: Conn, agent: str, depth: int) -> None:
    # Past the toast threshold: the native enqueue_run reads the whole value
    # to walk it (a small one cannot be too deep and is not walked).
    payload = nested(depth)
    payload["filler"] = "x" * 300_000
    statement = "SELECT outcome FROM office.enqueue_run('a1', 'r', %s)"
    if depth == 64:
        assert db.execute(statement, [Jsonb(payload)]).fetchone() == ("queued",)
    else:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^payload nests more"):
            db.execute(statement, [Jsonb(payload)])


def test_a_run_stored_deep_before_the_bound_stays_writable(db: Conn, agent: str) -> None:
    # A run written before 0.5.0 bounded the depth (planted here past the
    # triggers) can still be claimed, failed, requeued and recovered: only a
    # value being written is checked.
    db.execute("SET session_replication_role = replica")
    run_id = db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, payload) VALUES ('a1', 'deep',"
        " jsonb_build_object('deep', (repeat('[', 1200) || repeat(']', 1200))::jsonb))"
        " RETURNING id"
    ).fetchone()
    db.execute("RESET session_replication_role")
    assert run_id is not None
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w', 'a1')").fetchone()
    assert claimed == (run_id[0], 1)
    assert db.execute("SELECT office.fail_run(%s, 1, 'x')", [run_id[0]]).fetchone() == (True,)
    assert db.execute("SELECT office.requeue_run(%s)", [run_id[0]]).fetchone() == (True,)
