"""The observer commands of ``officectl``: ``stats`` and ``events tail``.

Both only read. ``events tail`` in particular reads ``office.events`` by id
and never claims or acknowledges anything: the subscribers of the control
plane see exactly what they would have seen without it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import click
import psycopg

from controlplane.cli.base import (
    Context,
    cell,
    connect,
    describe,
    json_option,
    jsonable,
    one_line_errors,
    print_json,
    print_table,
    stderr,
)
from controlplane.client.queries import observe as q
from controlplane.client.sync import fetch_rows

STATS_TITLES = {
    "dedup_stats": "office.dedup_stats",
    "keyless_stats": "office.keyless_stats",
    "queue_stats": "office.queue_stats",
}


@click.command()
@json_option
@click.pass_obj
@one_line_errors
def stats(obj: Context, as_json: bool) -> None:
    """Dedup, keyless and queue statistics (office.dedup_stats,
    office.keyless_stats, office.queue_stats). A durable dedup is a normal
    outcome (a late redelivery), not an anomaly."""
    with connect(obj.database_url()) as conn:
        report = {name: fetch_rows(conn, query) for name, query in q.OBSERVE_STATS.items()}
    if as_json:
        print_json(report)
        return
    empty = {"dedup_stats": "no suppressed enqueues yet", "keyless_stats": "no keyless enqueues"}
    for name, rows in report.items():
        columns = list(rows[0]) if rows else []
        print_table(
            STATS_TITLES[name],
            columns,
            [list(row.values()) for row in rows],
            empty=f"{STATS_TITLES[name]}: {empty.get(name, 'empty')}",
        )


# --- events tail ------------------------------------------------------------------

#: Rows read per poll while following (a backlog is paged through).
POLL_ROWS = 500
#: Ids skipped below the newest seen one are re-read this long: a transaction
#: may commit an event with a lower id after a higher one was already seen.
GAP_SECONDS = 30.0
MAX_GAPS = 10_000


@dataclass
class Tail:
    """Which events were printed: the newest id seen and the ids below it not
    seen yet (gaps: still uncommitted, or rolled back), with when each was
    first noticed."""

    last: int = 0
    gaps: dict[int, float] = field(default_factory=dict)

    def record(self, ids: list[int], now: float, *, from_id: int | None = None) -> None:
        """Note ``ids`` (one read); every id between the previous newest (or
        ``from_id``) and the new newest that was not read becomes a gap."""
        seen = set(ids)
        for event_id in seen:
            self.gaps.pop(event_id, None)
        if not seen:
            return
        start = self.last if from_id is None else from_id
        newest = max(seen)
        for event_id in range(start + 1, newest):
            if event_id not in seen:
                self.gaps.setdefault(event_id, now)
        self.last = max(self.last, newest)
        self.expire(now)

    def expire(self, now: float) -> None:
        for event_id, noticed in list(self.gaps.items()):
            if now - noticed > GAP_SECONDS:
                del self.gaps[event_id]
        while len(self.gaps) > MAX_GAPS:
            del self.gaps[min(self.gaps)]


def _initial(
    conn: psycopg.Connection[Any], tail: Tail, since: int | None, limit: int
) -> list[dict[str, Any]]:
    if since is None:
        rows = fetch_rows(conn, q.OBSERVE_NEWEST_EVENTS, {"limit": limit})
        rows.reverse()
        if rows:
            tail.record([r["id"] for r in rows], time.monotonic(), from_id=rows[0]["id"] - 1)
        else:
            found = fetch_rows(conn, q.OBSERVE_NEWEST_EVENT_ID)
            tail.last = int(found[0]["value"]) if found else 0
    else:
        tail.last = since
        rows = fetch_rows(conn, q.OBSERVE_EVENTS_AFTER, {"since": since, "limit": limit})
        tail.record([r["id"] for r in rows], time.monotonic())
    return rows


def _poll(conn: psycopg.Connection[Any], tail: Tail) -> list[dict[str, Any]]:
    params = {"last": tail.last, "gaps": list(tail.gaps), "rows": POLL_ROWS}
    rows = fetch_rows(conn, q.OBSERVE_EVENTS_POLL, params)
    tail.record([r["id"] for r in rows], time.monotonic())
    return rows


def _print_event(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(row)
        return
    created = jsonable(row["created_at"])
    task = f"task={row['task_id']} " if row["task_id"] else ""
    click.echo(f"#{row['id']} {created} {row['topic']} {task}{cell(row['payload'])}")


class _Stop:
    """SIGINT/SIGTERM end a follow cleanly (exit 0)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)


def _connections(url: str, stop: _Stop) -> Iterator[psycopg.Connection[Any]]:
    """Connections for a follow: a new one, with backoff, after a lost one."""
    delay = 0.5
    while not stop.event.is_set():
        try:
            conn = connect(url)
        except psycopg.OperationalError as exc:
            stderr.print(f"[yellow]events tail: {describe(exc)}; retrying in {delay:.0f}s[/yellow]")
            if stop.wait(delay):
                return
            delay = min(delay * 2, 10.0)
            continue
        delay = 0.5
        with conn:
            yield conn


@click.group()
def events() -> None:
    """The event outbox (office.events)."""


@events.command("tail")
@click.option("--since", type=int, help="Start after this event id (oldest first).")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Events in the first read: the newest N, or the first N after --since.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they commit.")
@click.option(
    "--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, help="Seconds."
)
@json_option
@click.pass_obj
@one_line_errors
def events_tail(
    obj: Context, since: int | None, limit: int, follow: bool, interval: float, as_json: bool
) -> None:
    """Print events of the outbox, one per line (--json: JSON Lines).

    Only reads: nothing is claimed or acknowledged, so the control plane's
    subscribers are not affected. With --follow, polls every --interval
    seconds until interrupted (SIGINT or SIGTERM, exit 0)."""
    url = obj.database_url()
    tail = Tail()
    stop = _Stop()
    # Handlers first: a signal that arrives while the first events print must
    # already end the follow cleanly.
    signals = (signal.SIGINT, signal.SIGTERM) if follow else ()
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        with connect(url) as conn:
            for row in _initial(conn, tail, since, limit):
                _print_event(row, as_json)
        if not follow:
            return
        for conn in _connections(url, stop):
            try:
                while not stop.event.is_set():
                    rows = _poll(conn, tail)
                    for row in rows:
                        _print_event(row, as_json)
                    if len(rows) < POLL_ROWS and stop.wait(interval):
                        return
            except psycopg.OperationalError as exc:
                if conn.closed or conn.broken:
                    lost = describe(exc)
                    stderr.print(f"[yellow]events tail: lost the database: {lost}[/yellow]")
                    continue
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


COMMANDS = [stats, events]
