"""The run flows' choice of statement by what the schema offers (pure Python,
no server: each flow is driven with scripted replies)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from controlplane.client import Operations
from controlplane.client.core import Call, Reply, drive
from controlplane.client.queries import Query
from controlplane.client.queries import runs as q
from controlplane.observability import Reporter


def _script(fence: bool) -> tuple[list[Call], Callable[[Call], Reply]]:
    calls: list[Call] = []

    def perform(call: Call) -> Reply:
        calls.append(call)
        if call.query is q.PROBE_WORKER_FENCE:
            return Reply(rows=[{"?column?": 1}] if fence else [])
        return Reply(rows=[{"changed": True}])

    return calls, perform


def _ops() -> Operations:
    return Operations(Reporter(CollectorRegistry()))


def test_a_retryable_failure_before_0_5_0_is_refused_by_name_and_sends_nothing() -> None:
    calls, perform = _script(fence=False)
    with pytest.raises(ValueError, match=r"retryable=True\) needs schema 0\.5\.0"):
        drive(_ops().fail_run("r1", 1, "flaky", retryable=True, worker_id="w1"), perform)
    assert [c.query for c in calls] == [q.PROBE_WORKER_FENCE]


@pytest.mark.parametrize("worker_id", ["w1", None])
def test_a_retryable_failure_on_0_5_0_carries_the_worker_fence(worker_id: str | None) -> None:
    calls, perform = _script(fence=True)
    ops = _ops()
    assert drive(ops.fail_run("r1", 1, "flaky", retryable=True, worker_id=worker_id), perform)
    queries: list[Query] = [c.query for c in calls]
    assert queries == [q.PROBE_WORKER_FENCE, q.FAIL_RUN_FENCED]
    assert calls[-1].params["retryable"] is True and calls[-1].params["worker_id"] == worker_id
    # The probe is asked once per client.
    drive(ops.fail_run("r2", 1, "flaky", retryable=True), perform)
    assert [c.query for c in calls[2:]] == [q.FAIL_RUN_FENCED]
