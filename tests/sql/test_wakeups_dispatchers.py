"""Two wakeup loops (dispatch_queued_wakeups in two daemons) never deadlock.

Each dispatch holds its agent's lock until commit. Staged: a third session
holds agent-x's lock; loop A picks the two oldest requests (agent-x, then
agent-y) and waits on agent-x; loop B picks the next two (agent-y, then
agent-x). Dispatched in age order B would take agent-y and wait on agent-x,
and A, once it has agent-x, would wait on agent-y: a deadlock (the control
shows it, dispatching in age order by hand). Dispatched in agent order, B
waits on agent-x holding nothing, and both loops finish."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from tests.harness import scalar, wait_until_blocked
from tests.scenarios.tasks import Conn, agent, call


def _four_requests(db: Conn) -> list[str]:
    """Requests for agent-x, agent-y, agent-y, agent-x, oldest first."""
    agent(db, "agent-x")
    agent(db, "agent-y")
    ids = []
    for age, who in enumerate(["agent-x", "agent-y", "agent-y", "agent-x"]):
        row = call(db, "request_wakeup", agent_profile_id=who, source="user", payload="{}")
        db.execute(
            "UPDATE office.wakeup_requests SET requested_at = now() - make_interval(secs => %s)"
            " WHERE id = %s",
            [100 - age, row["wakeup_request_id"]],
        )
        ids.append(str(row["wakeup_request_id"]))
    return ids


class _Session:
    """One connection running one transaction's statements in a thread."""

    def __init__(self, dsn: str, work: Callable[[psycopg.Connection[Any]], None]) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with self.conn.transaction():
                self._work(self.conn)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(60)
        assert not self._thread.is_alive(), f"backend {self.pid} still running"
        self.conn.close()


def _stage(
    db: Conn,
    dsn: str,
    first: Callable[[psycopg.Connection[Any]], None],
    second: Callable[[psycopg.Connection[Any]], None],
) -> list[BaseException | None]:
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT office._xact_lock(office._lock_key('wakeups.agent', 'agent-x'))")
        a = _Session(dsn, first)
        a.start()
        wait_until_blocked(db, a.pid)
        b = _Session(dsn, second)
        b.start()
        wait_until_blocked(db, b.pid)
        holder.commit()
    a.join()
    b.join()
    return [a.error, b.error]


def _loop(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT * FROM office.dispatch_queued_wakeups(2)").fetchall()


def test_two_wakeup_loops_take_agents_in_one_order(db: Conn, dsn: str) -> None:
    ids = _four_requests(db)
    assert _stage(db, dsn, _loop, _loop) == [None, None]
    statuses = db.execute(
        "SELECT status FROM office.wakeup_requests WHERE id = ANY(%s)", [ids]
    ).fetchall()
    assert sorted(s for (s,) in statuses) == ["claimed", "claimed", "coalesced", "coalesced"]
    assert scalar(db, "SELECT count(*) FROM office.runs") == 2


def test_control_dispatching_in_age_order_deadlocks(db: Conn, dsn: str) -> None:
    ids = _four_requests(db)

    def in_order(*request_ids: str) -> Callable[[psycopg.Connection[Any]], None]:
        def work(conn: psycopg.Connection[Any]) -> None:
            for request_id in request_ids:
                conn.execute("SELECT office.dispatch_wakeup(%s)", [request_id])

        return work

    errors = _stage(db, dsn, in_order(ids[0], ids[1]), in_order(ids[2], ids[3]))
    assert [type(e) for e in errors].count(psycopg.errors.DeadlockDetected) == 1, errors
