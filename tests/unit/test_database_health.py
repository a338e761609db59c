"""DatabaseHealth logs one outage once: a reply to a call begun before the
loss was recorded (another thread's call that succeeded just before the
outage), or just after it (a backend the shutting-down server has not ended
yet), is not the connection's return, so it neither logs a return nor makes
the next failure a second loss."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from controlplane.daemon.loop import DatabaseHealth


def _events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records if getattr(r, "event", "")]


def test_a_reply_to_a_call_begun_before_the_loss_is_not_the_return(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="controlplane")
    health = DatabaseHealth(None)
    before = time.perf_counter()
    health.ok(before)
    loss = psycopg.OperationalError("server closed the connection unexpectedly")
    health.lost("outcome", loss, 1.0)
    health.ok(before)  # the claim thread's reply, from before the outage
    assert not health.up
    health.lost("claim", loss, 1.0)  # still the same outage
    health.ok(time.perf_counter() + DatabaseHealth.SETTLE)  # a call begun after it: the return
    assert health.up
    assert _events(caplog) == ["database_lost", "database_unavailable", "database_restored"]


def test_a_connection_the_shutting_down_server_has_not_ended_yet_is_not_the_return(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A fast shutdown ends backends one by one: a call begun just after
    # another's loss can still succeed on a pooled connection, then fail.
    caplog.set_level(logging.INFO, logger="controlplane")
    health = DatabaseHealth(None)
    loss = psycopg.OperationalError("terminating connection due to administrator command")
    health.lost("claim", loss, 1.0)
    health.ok(time.perf_counter())  # the heartbeat, on a backend not ended yet
    assert not health.up
    health.lost("heartbeat", loss, 1.0)
    assert _events(caplog) == ["database_lost", "database_unavailable"]
