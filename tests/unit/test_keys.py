"""The key builders of docs/api.md §1 in Python (``controlplane.keys``) against
the one shared vector file ``tests/vectors/keys.json`` (docs/domain.md §3 vectors
plus edge cases), which the SQL builders meet too (``tests/sql/test_keys_sql.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from controlplane import keys
from controlplane.errors import InvalidArgument
from tests.scenarios.keys import DEFAULTED, SIGNATURES, VECTORS, SqlResult, check, vector_ids

PYTHON_BUILDERS: dict[str, Callable[..., str | None]] = {
    name: getattr(keys, name) for name in SIGNATURES
}


def python_args(vector: dict[str, Any]) -> dict[str, Any]:
    """The vector's arguments as Python values (timestamps become aware datetimes)."""
    types = dict(SIGNATURES[vector["function"]])
    return {
        name: datetime.fromisoformat(value)
        if value is not None and types[name] == "timestamp with time zone"
        else value
        for name, value in vector["args"].items()
    }


def test_vector_file_is_well_formed() -> None:
    # The builders are the functions the vectors call: each Python builder has vectors.
    assert sorted(SIGNATURES) == sorted(keys.__all__)
    names = vector_ids(VECTORS)
    assert len(names) == len(set(names))
    for vector in VECTORS:
        assert vector["function"] in SIGNATURES, vector["name"]
        params = [name for name, _ in SIGNATURES[vector["function"]]]
        required = [name for name in params if name not in DEFAULTED[vector["function"]]]
        assert set(required) <= set(vector["args"]) <= set(params), vector["name"]
        assert ("error" in vector) != ("expected" in vector), vector["name"]
    # every builder has value, null and (but for the two without ids) error vectors
    for function in SIGNATURES:
        mine = [v for v in VECTORS if v["function"] == function]
        assert any(v.get("expected") is not None for v in mine), function
        assert any("expected" in v and v["expected"] is None for v in mine), function
        if function not in ("second_precision_text", "routine_fingerprint"):
            assert any("error" in v for v in mine), function


@pytest.mark.parametrize("vector", VECTORS, ids=vector_ids(VECTORS))
def test_python_vector(vector: dict[str, Any]) -> None:
    builder = PYTHON_BUILDERS[vector["function"]]
    try:
        value = builder(**python_args(vector))
    except InvalidArgument as exc:
        result = SqlResult(sqlstate=exc.sqlstate, message=str(exc))
    else:
        result = SqlResult(value=value)
    check(vector, result)


def test_python_signatures_match_sql() -> None:
    for name, signature in SIGNATURES.items():
        params = inspect.signature(PYTHON_BUILDERS[name]).parameters
        assert list(params) == [n for n, _ in signature], name
        defaults = [p for p in params.values() if p.default is not inspect.Parameter.empty]
        assert [p.name for p in defaults] == DEFAULTED[name], name


@pytest.mark.parametrize(
    "call",
    [
        lambda: keys.second_precision_text(datetime(2026, 1, 1, 0, 10)),
        lambda: keys.routine_key("cron", "routine-1", "trigger-1", datetime(2026, 5, 10, 12), None),
        lambda: keys.assignment_key("task-1", "agent-A", 2**63),
        lambda: keys.assignment_key("task-1", "agent-A", True),
        lambda: keys.assignment_key("task\x00-1", "agent-A", 1),
        lambda: keys.blocker_digest("blocker-a"),
        lambda: keys.wake_operation_id("parent-1", "child-a:COMPLETED", "\x00"),
        lambda: keys.routine_fingerprint("\ud800", "", "agent-1"),
    ],
    ids=[
        "naive-ts",
        "naive-claimed-tick",
        "generation-beyond-bigint",
        "bool-generation",
        "nul-in-id",
        "text-as-blocker-ids",
        "nul-in-generation",
        "lone-surrogate",
    ],
)
def test_python_refuses_what_sql_cannot_receive(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert raised.value.sqlstate == "22023"


def test_python_datetime_zones_are_equivalent() -> None:
    utc = datetime(2026, 5, 10, 12, 0, 0, 999_999, tzinfo=UTC)
    other = utc.astimezone(timezone(timedelta(hours=-7)))
    assert keys.second_precision_text(other) == keys.second_precision_text(utc)
    assert keys.routine_key("cron", "r", "t", other, None) == keys.routine_key(
        "cron", "r", "t", utc, None
    )
