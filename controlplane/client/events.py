"""The operations of the transactional outbox (docs/api.md §6): one flow each,
shared by both clients (see :mod:`controlplane.client.core`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from controlplane.client.core import Flow, OperationsCore, as_interval
from controlplane.client.queries import events as q
from controlplane.models import ClaimedEventRow, Event

__all__ = ["EventOperations"]


class EventOperations(OperationsCore):
    def claim_events(
        self, consumer: str, max_rows: int = 100, visibility: timedelta | float = 30
    ) -> Flow[list[Event]]:
        """``office.claim_events``: up to ``max_rows`` pending events, hidden
        from other consumers for ``visibility`` (seconds or a timedelta)."""
        params = {"consumer": consumer, "max_rows": max_rows, "visibility": as_interval(visibility)}
        return (yield from self.models(Event, q.CLAIM_EVENTS, params))

    def claim_event_rows(
        self, consumer: str, max_rows: int = 100, visibility: timedelta | float = 30
    ) -> Flow[list[ClaimedEventRow]]:
        """``office.claim_events`` for a consumer that decodes each event on
        its own (the event subscriber): the batch as values that always load,
        by id - the payload as its JSON text, a creation time Python cannot
        represent as None - so one event written by hand cannot fail the
        batch (:meth:`ClaimedEventRow.decode` raises for that event alone)."""
        params = {"consumer": consumer, "max_rows": max_rows, "visibility": as_interval(visibility)}
        return (yield from self.models(ClaimedEventRow, q.CLAIM_EVENT_ROWS, params))

    def ack_events(self, ids: Iterable[int]) -> Flow[int]:
        """``office.ack_events``: how many of ``ids`` were acknowledged now."""
        return (yield from self.count(q.ACK_EVENTS, {"ids": list(ids)}))

    def prune_events(self, older_than: timedelta | float) -> Flow[int]:
        """``office.prune_events``: acknowledged events older than
        ``older_than`` deleted; how many."""
        return (yield from self.count(q.PRUNE_EVENTS, {"older_than": as_interval(older_than)}))
