"""A catalog-driven fuzz of the whole API (docs/api.md Conventions, §7): every
public function of schema office, read from pg_proc (``_``-prefixed internals
and trigger functions excluded), called with every parameter in turn set to
each hostile value below (cast to the parameter's type where it parses; a
value the type cannot represent is skipped), the other parameters valid.

The call may succeed or fail, but only with a SQLSTATE of docs/api.md §7 (a
``23505`` must name the id, not be the raw index message), and a failed call
leaves every office table's row count as it was. A call that succeeds must
have stored nothing past the bounds of docs/api.md Conventions (which would fail
later, in a background loop): no time outside 1970-01-01 .. 9999-12-31, no
text over 64 KiB, no document over 1 MiB (plus what the API adds), no short
word (:data:`SHORT_WORDS`) over 200 characters or with a control character.
Each call runs in its own transaction, rolled back afterwards, so every call
sees the same fixtures.

A function added later is picked up from the catalog: without a baseline
recipe in :data:`RECIPES` it fails :func:`test_every_function_has_a_recipe`,
which says to add one. A hypothesis test then combines several hostile
values in one call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.scenarios.keys import VECTORS

Conn = psycopg.Connection[Any]

#: docs/api.md §7.
ALLOWED_SQLSTATES = frozenset(
    {"22023", "OFA01", "OFA02", "OFT01", "OFR01", "OFW01", "23505", "40001", "40P01"}
)

MIB = 1024 * 1024

#: The hostile values of the issue, as text; each is cast to the parameter's type.
HOSTILE: dict[str, str | None] = {
    "NULL": None,
    "empty": "",
    "201 characters": "w" * 201,
    "64 KiB + 1": "x" * (64 * 1024 + 1),
    "1 MiB": "y" * (MIB + 1),
    "control character": "a\x01b",
    "infinity": "infinity",
    "-1 day": "-1 day",
    "1000000 years": "1000000 years",
    "4713-01-01 BC": "4713-01-01 BC",
    "non-object JSON": "[1, 2]",
    "unknown word": "no_such_word",
}

#: More values for the types the words above barely reach.
EXTRA_BY_TYPE: dict[str, dict[str, str]] = {
    "jsonb": {
        "3000-deep JSON": "[" * 3000 + "]" * 3000,
        "object 65 deep": '{"a": ' + "[" * 64 + "]" * 64 + "}",
        "object 3000 deep": '{"a": ' + "[" * 3000 + "]" * 3000 + "}",
        "object with 64 KiB + 1": json.dumps({"title": "x" * (64 * 1024 + 1)}),
        "object with 1 MiB": json.dumps({"k": "y" * (MIB + 1)}),
        "JSON string": '"a"',
    },
    "integer": {"-1": "-1", "0": "0", "max int": "2147483647", "min int": "-2147483648"},
    "bigint": {"-1": "-1", "max bigint": "9223372036854775807"},
    "text[]": {
        "empty array": "{}",
        "empty element": '{""}',
        "201-character element": "{" + "w" * 201 + "}",
        "control character element": '{"a\x01b"}',
    },
    "bigint[]": {"empty array": "{}", "negative": "{-1}"},
    "timestamp with time zone": {
        "-infinity": "-infinity",
        "1969": "1969-12-31 23:59:59+00",
        "10000": "10000-01-01 00:00:00+00",
    },
    "interval": {"-infinity": "-infinity", "101 years": "101 years"},
    # An explicit id that exists (create_task, create_routine, add_routine_trigger).
    "text": {"existing task id": "T", "existing routine id": "R", "existing trigger id": "t1"},
}

#: Stored columns that hold short words (docs/api.md Conventions).
SHORT_WORDS = {
    "events": ("claimed_by",),
    "routine_runs": ("trigger_id",),
    "routine_triggers": ("cron_expression", "timezone"),
    "runs": ("reason", "task_id", "claimed_by"),
    "tasks": ("workflow_step_id",),
    "wakeup_requests": ("source",),
}

# --- fixtures and recipes --------------------------------------------------------------------

FIXTURES_SQL = """
SELECT office.upsert_agent('a1', 'w1');
SELECT office.upsert_agent('b1', 'w1');
SELECT office.upsert_agent('p1', 'w1', status => 'paused');
SELECT office.upsert_agent('x1', 'w2');
SELECT office.create_task('w1', 'T', 'task', workflow_step_id => 's',
                          assignee_agent_profile_id => 'a1');
SELECT office.create_task('w1', 'U', 'other');
SELECT office.create_task('w1', 'B', 'blocker');
SELECT office.add_blocker('T', 'B');
SELECT office.create_task('w1', 'P', 'parent', assignee_agent_profile_id => 'b1');
SELECT office.create_task('w1', 'C', 'child', parent_id => 'P');
SELECT office.move_task('C', 'COMPLETED');
SELECT office.create_task('w2', 'X', 'elsewhere');
SELECT office.create_routine('w1', 'heavy', '{"title": "Check {{day}}"}', 'a1',
                             variables => '{"day": {"default": "today"}}', id => 'R');
SELECT office.create_routine('w1', 'light', '{}', 'b1', 'always_create', id => 'L');
SELECT office.add_routine_trigger('L', '0 12 * * *', 'UTC', '2026-01-01 12:00:00+00', id => 't1');
SELECT office.dispatch_routine('R', 'manual');
SELECT office.request_wakeup('b1', 'user', 'ping', '{}', 'fixture-wakeup');
SELECT office.enqueue_run('b1', 'fixture_queued', idempotency_key => 'fixture-queued');
SELECT office.enqueue_run('a1', 'fixture_claimed', idempotency_key => 'fixture-claimed');
SELECT office.claim_run('fixture-worker', 'a1');
SELECT office.assign_task('U', 'b1', 'u1');
"""

FIXTURE_IDS = """
SELECT (SELECT id FROM office.runs WHERE idempotency_key = 'fixture-queued'),
       (SELECT id FROM office.runs WHERE idempotency_key = 'fixture-claimed'),
       (SELECT attempt FROM office.runs WHERE idempotency_key = 'fixture-claimed'),
       (SELECT id FROM office.wakeup_requests WHERE idempotency_key = 'fixture-wakeup'),
       (SELECT id FROM office.routine_runs WHERE routine_id = 'R'),
       (SELECT linked_task_id FROM office.routine_runs WHERE routine_id = 'R'),
       (SELECT min(id) FROM office.events),
       office.child_set_key('P'), office.child_generation('P')
"""

_FIXTURE_ID = re.compile(r"<([a-z_]+)>")

TICK = "2026-01-01 12:00:00+00"
NEXT_TICK = "2026-01-02 12:00:00+00"


def _as_text(value: Any) -> str | None:
    """A vector's JSON argument as the text a cast to its type reads."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return "{" + ",".join(json.dumps(item, ensure_ascii=False) for item in value) + "}"
    return str(value)


def _key_builder_recipes() -> dict[str, dict[str, str | None]]:
    """A valid call of each key builder of docs/api.md §1: its first vector
    with an expected key (tests/vectors/keys.json), so a new builder's
    vectors are its recipe too."""
    recipes: dict[str, dict[str, str | None]] = {}
    for vector in VECTORS:
        if vector.get("expected") is not None and "error" not in vector:
            recipes.setdefault(
                vector["function"], {k: _as_text(v) for k, v in vector["args"].items()}
            )
    return recipes


#: A valid call of every public function: parameter -> text (cast to the
#: parameter's type), ``<name>`` filled from the fixtures. Parameters left out
#: take their defaults. The key builders' come from their vectors.
RECIPES: dict[str, dict[str, str | None]] = {
    **_key_builder_recipes(),
    "schema_version": {},
    "upsert_agent": {"id": "a9", "workspace_id": "w1", "name": "n", "status": "idle"},
    "set_agent_status": {"id": "a1", "status": "running"},
    "enqueue_run": {
        "agent_profile_id": "b1",
        "reason": "task_comment",
        "payload": '{"c": 1}',
        "idempotency_key": "task_comment:c9:b1",
        "task_id": "T",
        "entry_triggered": "false",
        "keyless_cause": None,
        "keyless_detail": None,
    },
    "enqueue_runs": {"requests": '[{"agent_profile_id": "b1", "reason": "bulk"}]'},
    "claim_run": {"worker_id": "wk", "agent_profile_id": "b1"},
    "heartbeat_run": {"run_id": "<claimed_run>", "attempt": "<attempt>"},
    "get_run": {"run_id": "<queued_run>"},
    "run_keys": {"run_id": "<queued_run>"},
    "finish_run": {"run_id": "<claimed_run>", "attempt": "<attempt>"},
    "fail_run": {"run_id": "<claimed_run>", "attempt": "<attempt>", "error_message": "e"},
    "retry_run": {"run_id": "<claimed_run>", "attempt": "<attempt>", "delay": "1 minute"},
    "cancel_run": {"run_id": "<queued_run>", "reason": "r"},
    "requeue_run": {"run_id": "<queued_run>"},
    "requeue_runs": {"run_ids": "{<queued_run>}"},
    "cancel_runs": {"run_ids": "{<queued_run>,<claimed_run>}", "reason": "r"},
    "record_run_cost": {
        "run_id": "<claimed_run>",
        "attempt": "<attempt>",
        "amount": "1.5",
        "worker_id": None,
    },
    "explain_agent": {"agent_profile_id": "a1", "max_rows": "50"},
    "set_wake_policy": {
        "scope": "agent",
        "scope_id": "a1",
        "cooldown": "1 minute",
        "max_runs": "5",
        "per": "1 hour",
        "budget": "100",
        "budget_period": "week",
        "max_retries": "2",
        "retry_backoff": "{1 minute,5 minutes}",
    },
    "clear_wake_policy": {"scope": "agent", "scope_id": "a1"},
    "recover_stale_runs": {"older_than": "1 hour"},
    "prune_runs": {"older_than": "1 day"},
    "create_task": {
        "workspace_id": "w1",
        "id": "T9",
        "title": "t",
        "parent_id": "P",
        "workflow_step_id": "s",
        "assignee_agent_profile_id": "a1",
        "state": "TODO",
        "is_office": "true",
        "is_ephemeral": "false",
    },
    "assign_task": {
        "task_id": "T",
        "assignee_agent_profile_id": "b1",
        "actor_id": "u1",
        "actor_type": "user",
    },
    "move_task": {"task_id": "T", "state": "IN_PROGRESS"},
    "archive_task": {"task_id": "T"},
    "add_blocker": {"task_id": "T", "blocker_task_id": "U"},
    "remove_blocker": {"task_id": "T", "blocker_task_id": "B"},
    "task_terminal_status": {"task_id": "T"},
    "is_task_terminal": {"task_id": "T"},
    "get_task": {"task_id": "T"},
    "child_set_key": {"parent_task_id": "P"},
    "child_generation": {"parent_task_id": "P"},
    "claim_events": {"consumer": "c", "max_rows": "10", "visibility": "30 seconds"},
    "ack_events": {"ids": "{<first_event>}"},
    "prune_events": {"older_than": "1 day"},
    "prune_wake_decisions": {"older_than": "1 day"},
    "request_wakeup": {
        "agent_profile_id": "b1",
        "source": "user",
        "reason": "ping",
        "payload": '{"c": 1}',
        "idempotency_key": "wk-new",
    },
    "dispatch_wakeup": {"wakeup_request_id": "<wakeup>"},
    "fail_wakeup": {"wakeup_request_id": "<wakeup>", "reason": "r"},
    "create_routine": {
        "workspace_id": "w1",
        "name": "n",
        "task_template": '{"title": "t {{v}}", "description": "d"}',
        "assignee_agent_profile_id": "a1",
        "concurrency_policy": "skip_if_active",
        "variables": '{"v": {"default": "x"}}',
        "id": "R9",
        "catch_up_policy": "skip_missed",
        "catch_up_max": "3",
    },
    "add_routine_trigger": {
        "routine_id": "L",
        "cron_expression": "* * * * *",
        "timezone": "UTC",
        "next_run_at": TICK,
        "id": "t9",
    },
    "claim_routine_tick": {
        "trigger_id": "t1",
        "observed_next_run_at": TICK,
        "following_next_run_at": NEXT_TICK,
    },
    "close_routine_run": {"routine_run_id": "<routine_run>", "terminal": "done"},
    "sync_routine_run_status": {"task_id": "<routine_task>", "terminal": "done"},
    "dispatch_routine": {
        "routine_id": "R",
        "source": "manual",
        "variables": '{"day": "tomorrow"}',
        "trigger_id": None,
        "claimed_tick": None,
        "explicit_key": None,
        "missed_ticks": None,
        "missed_since": None,
        "missed_truncated": None,
    },
    "list_stuck_parents": {"max_rows": "5", "reason": "task_children_completed"},
    "list_runs": {
        "status": "queued",
        "agent_profile_id": "b1",
        "reason": "fixture_queued",
        "key_prefix": "fixture-",
        "before_id": None,
        "page_size": "10",
    },
    "run_window_end": {"before_id": "<queued_run>"},
    "run_status_counts": {},
    "list_agents": {"after_id": "a", "page_size": "10"},
    "list_tasks": {"before_id": "Z", "page_size": "10"},
    "list_task_children": {"parent_task_id": "P", "after_id": None, "page_size": "10"},
    "list_task_blockers": {"task_id": "T", "after_id": None, "page_size": "10"},
    "get_parent_receipt": {"parent_task_id": "P"},
    "list_routines": {"before_id": None, "page_size": "10"},
    "get_routine": {"routine_id": "R"},
    "list_routine_triggers": {"routine_id": "L", "after_id": None, "page_size": "10"},
    "list_routine_runs": {"routine_id": "R", "before_id": None, "page_size": "10"},
    "list_wakeups": {"before_id": None, "page_size": "10"},
    "list_events": {"before_id": None, "page_size": "10"},
    "reconcile_parent": {
        "parent_task_id": "P",
        "child_set_key": "<child_set_key>",
        "newest_child_updated_at": "<child_generation>",
    },
    "sweep_stuck_parents": {"max_rows": "5"},
    "mark_all_parents": {},
    "due_routine_triggers": {"at": NEXT_TICK, "max_rows": "10"},
    "fire_routine_tick": {
        "trigger_id": "t1",
        "observed_next_run_at": TICK,
        "following_next_run_at": NEXT_TICK,
        "missed_ticks": "1",
        "missed_since": TICK,
        "missed_truncated": "false",
    },
    "dispatch_queued_wakeups": {"max_rows": "5", "min_age": "0"},
    "daemon_stats": {},
    "set_aside": {"loop": "wakeups", "row_id": "<wakeup>", "reason": "r", "sqlstate": "22023"},
    "take_poison_reports": {"loop": "wakeups", "max_rows": "10"},
    "release_poison": {"loop": "wakeups", "row_id": "<wakeup>"},
}


@dataclass(frozen=True)
class Function:
    name: str
    signature: str
    params: tuple[tuple[str, str], ...]  # (name, type) of the input parameters


CATALOG = """
SELECT p.proname, p.oid::pg_catalog.regprocedure::pg_catalog.text,
       coalesce(p.proargnames, '{}'), coalesce(p.proargmodes::pg_catalog.text[], '{}'),
       ARRAY(SELECT pg_catalog.format_type(t, NULL) FROM pg_catalog.unnest(p.proargtypes) t)
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'office'::pg_catalog.regnamespace
   AND p.prokind = 'f'
   AND p.proname !~ '^_'
   AND p.prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype
 ORDER BY 1
"""


def catalog(conn: Conn) -> list[Function]:
    functions = []
    for name, signature, names, modes, types in conn.execute(CATALOG).fetchall():
        inputs = [n for n, m in zip(names, modes or ["i"] * len(names), strict=True) if m in "ibv"]
        assert len(inputs) == len(types), f"{signature}: unnamed parameters"
        functions.append(Function(name, signature, tuple(zip(inputs, types, strict=True))))
    return functions


@dataclass(frozen=True)
class Outcome:
    error: str | None  # the first line of the error, None when the call succeeded
    problem: str  # what is wrong with how it failed ('' when nothing is)

    def __str__(self) -> str:
        return self.problem if self.error is None else f"{self.problem}: {self.error}"


@dataclass
class Bed:
    """The fixture database and what a call needs to know about it."""

    conn: Conn
    functions: list[Function]
    ids: dict[str, str]
    count_query: sql.Composed
    bounds_query: sql.Composed
    parses: dict[tuple[str, str], bool]

    def baseline(self, function: Function) -> dict[str, str | None]:
        return {
            param: None if value is None else _FIXTURE_ID.sub(lambda m: self.ids[m[1]], value)
            for param, value in RECIPES[function.name].items()
        }

    def counts(self) -> tuple[int, ...]:
        row = self.conn.execute(self.count_query).fetchone()
        assert row is not None
        return tuple(row)

    def representable(self, value: str | None, type_name: str) -> bool:
        if value is None:
            return True
        key = (value, type_name)
        if key not in self.parses:
            try:
                with self.conn.transaction():
                    self.conn.execute(
                        sql.SQL("SELECT %s::pg_catalog.text::{}").format(sql.SQL(type_name)),
                        [value],
                    )
                self.parses[key] = True
            except psycopg.Error:
                self.parses[key] = False
        return self.parses[key]

    def call(self, function: Function, args: dict[str, str | None]) -> Outcome:
        """One call in its own transaction, rolled back afterwards."""
        types = dict(function.params)
        query = sql.SQL("SELECT * FROM office.{}({})").format(
            sql.Identifier(function.name),
            sql.SQL(", ").join(
                sql.SQL("{} => {}::pg_catalog.text::{}").format(
                    sql.Identifier(name), sql.Placeholder(name), sql.SQL(types[name])
                )
                for name in args
            ),
        )
        with self.conn.transaction(force_rollback=True):
            self.conn.execute("SET LOCAL statement_timeout = '20s'")
            self.conn.execute("SET LOCAL lock_timeout = '5s'")
            before = self.counts()
            try:
                with self.conn.transaction():
                    self.conn.execute(query, args).fetchall()
            except psycopg.Error as exc:
                problems = []
                if exc.sqlstate not in ALLOWED_SQLSTATES:
                    problems.append(f"SQLSTATE {exc.sqlstate}")
                elif exc.sqlstate == "23505" and "duplicate key value" in str(exc):
                    problems.append("a raw 23505 (the index's message, not the id)")
                if self.counts() != before:
                    problems.append("row counts changed by a failed call")
                return Outcome(str(exc).splitlines()[0][:300], "; ".join(problems))
            past = [r[0] for r in self.conn.execute(self.bounds_query).fetchall()]
            return Outcome(None, f"stored past its bound: {', '.join(past)}" if past else "")


@pytest.fixture
def bed(db: Conn) -> Iterator[Bed]:
    db.execute(FIXTURES_SQL)
    row = db.execute(FIXTURE_IDS).fetchone()
    assert row is not None and None not in row, row
    names = (
        "queued_run",
        "claimed_run",
        "attempt",
        "wakeup",
        "routine_run",
        "routine_task",
        "first_event",
        "child_set_key",
        "child_generation",
    )
    ids = {name: str(value) for name, value in zip(names, row, strict=True)}
    tables = [
        r[0]
        for r in db.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = 'office'::pg_catalog.regnamespace AND c.relkind = 'r'"
            " ORDER BY 1"
        ).fetchall()
    ]
    count_query = sql.SQL("SELECT {}").format(
        sql.SQL(", ").join(
            sql.SQL("(SELECT pg_catalog.count(*) FROM office.{})").format(sql.Identifier(t))
            for t in tables
        )
    )
    db.autocommit = False
    try:
        yield Bed(db, catalog(db), ids, count_query, bounds_query(db), {})
    finally:
        db.rollback()
        db.autocommit = True


def bounds_query(conn: Conn) -> sql.Composed:
    """The columns of office tables holding a value past its bound."""
    checks = {
        "text": "pg_catalog.octet_length({c}) > 65536",
        "jsonb": (
            "pg_catalog.octet_length({c}::pg_catalog.text) > 1048576 + 65536"
            " OR NOT office._json_depth_ok({c})"
        ),
        "timestamp with time zone": (
            "NOT pg_catalog.isfinite({c}) OR {c} < '1970-01-01 00:00+00'"
            " OR {c} >= '10000-01-01 00:00+00'"
        ),
    }
    short = "pg_catalog.length({c}) > 200 OR {c} ~ '[\u0001-\u001f\u007f-\u009f]'"
    columns = conn.execute(
        "SELECT c.relname, a.attname, pg_catalog.format_type(a.atttypid, NULL)"
        "  FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = 'office'::pg_catalog.regnamespace AND c.relkind = 'r'"
        "   AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2"
    ).fetchall()
    by_table: dict[str, list[sql.Composable]] = {}
    for table, column, type_name in columns:
        conditions = [checks[type_name]] if type_name in checks else []
        if column in SHORT_WORDS.get(table, ()):
            conditions.append(short)
        for condition in conditions:
            by_table.setdefault(table, []).append(
                sql.SQL("CASE WHEN pg_catalog.bool_or({}) THEN {} END").format(
                    sql.SQL(condition).format(c=sql.Identifier(column)),
                    sql.Literal(f"{table}.{column}"),
                )
            )
    # One scan per table.
    parts = [
        sql.SQL("SELECT pg_catalog.unnest(ARRAY[{}]) FROM office.{}").format(
            sql.SQL(", ").join(items), sql.Identifier(table)
        )
        for table, items in by_table.items()
    ]
    return sql.SQL("SELECT DISTINCT x FROM ({}) AS f(x) WHERE x IS NOT NULL ORDER BY 1").format(
        sql.SQL(" UNION ALL ").join(parts)
    )


def hostile_values(type_name: str) -> dict[str, str | None]:
    return {**HOSTILE, **EXTRA_BY_TYPE.get(type_name, {})}


def fuzz(bed: Bed, functions: list[Function]) -> tuple[int, list[str]]:
    """Every parameter of every function with every hostile value: how many
    calls were made, and the findings."""
    calls = 0
    findings = []
    for function in functions:
        baseline = bed.baseline(function)
        for param, type_name in function.params:
            for label, value in hostile_values(type_name).items():
                if not bed.representable(value, type_name):
                    continue
                calls += 1
                outcome = bed.call(function, {**baseline, param: value})
                if outcome.problem:
                    findings.append(f"{function.signature} {param} = {label}: {outcome}")
    return calls, findings


def test_every_function_has_a_recipe(bed: Bed) -> None:
    missing = [f.signature for f in bed.functions if f.name not in RECIPES]
    assert not missing, (
        "add a baseline recipe (a valid call) to RECIPES in tests/sql/test_fuzz_catalog.py"
        " (a key builder's is its first vector in tests/vectors/keys.json) for: "
        + ", ".join(missing)
    )
    unknown = [
        f"{f.name}.{p}" for f in bed.functions for p in RECIPES[f.name] if p not in dict(f.params)
    ]
    assert not unknown, f"recipes name parameters the functions do not have: {unknown}"


def test_every_baseline_call_succeeds(bed: Bed) -> None:
    """The recipes are valid calls, so each fuzzed call differs from a good
    one in exactly the hostile value."""
    failures = []
    for function in bed.functions:
        if function.name not in RECIPES:
            continue
        outcome = bed.call(function, bed.baseline(function))
        if outcome.error is not None:
            failures.append(f"{function.signature}: the baseline call fails: {outcome.error}")
    assert not failures, "\n".join(failures)


def test_hostile_values_give_only_api_errors_and_write_nothing(bed: Bed) -> None:
    functions = [f for f in bed.functions if f.name in RECIPES]
    assert len(functions) >= 35
    calls, findings = fuzz(bed, functions)
    assert calls >= 1000, "the hostile values reach (almost) no parameter"
    assert not findings, f"{len(findings)} findings:\n" + "\n".join(findings)


# --- several hostile values in one call (hypothesis) --------------------------------------------


@settings(
    max_examples=150,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_combined_hostile_values(bed: Bed, data: st.DataObject) -> None:
    functions = [f for f in bed.functions if f.params and f.name in RECIPES]
    function = data.draw(st.sampled_from(functions), label="function")
    params = data.draw(
        st.lists(st.sampled_from(function.params), min_size=1, max_size=3, unique=True),
        label="parameters",
    )
    args = bed.baseline(function)
    for name, type_name in params:
        values = {
            k: v for k, v in hostile_values(type_name).items() if bed.representable(v, type_name)
        }
        label = data.draw(st.sampled_from(sorted(values)), label=name)
        args[name] = values[label]
    outcome = bed.call(function, args)
    assert not outcome.problem, f"{function.signature} {sorted(n for n, _ in params)}: {outcome}"
