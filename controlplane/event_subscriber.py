"""The event subscriber: the second producer of ``task_assigned`` runs
(docs/domain.md §2.12).

It consumes the transactional outbox (``office.claim_events`` /
``office.ack_events``, docs/api.md §6) and turns each ``task.assigned`` event into
a ``task_assigned`` run for an Office task, keyed
``assignment_key(task, agent, generation)`` with the generation the *event*
carries - the value the assignee write committed, never a re-read. These are
the bytes ``office.assign_task`` used for the same write, so the two
producers converge on one run (``idx_run_idempotency``), and a redelivered
event is a dedup, never a second run.

* An event without a generation (absent, null or not an integer) enqueues
  keyless with cause ``unresolved`` and detail ``event_missing_generation``.
* An event without an ``agent_profile_id`` field at all (not written by
  office's trigger) falls back to the task's stored assignee, keyless with
  cause ``unresolved`` and detail ``stored_runner_fallback``. An explicit
  null agent is an unassignment: nothing to wake.
* A missing task, a non-Office task, or an agent that is gone or does not
  accept runs is handled (acknowledged) without a run.
* Events of other topics are acknowledged without action unless a handler
  is registered for them (:attr:`EventSubscriber.handlers`).

Events are acknowledged after they were handled. An event whose handler
raised stays unacknowledged and is delivered again once its visibility
timeout expires (at-least-once); after ``give_up_after`` deliveries it is set
aside (``office.set_aside``: ``office.poison``, loop ``subscriber``), so one
poison event cannot circle forever. So is, at once, an event that cannot even
be decoded - a payload nested too deep for Python's JSON decoder, a time
outside Python's range, anything the owner wrote by hand: each row of a batch
is decoded on its own, so such an event never holds up the rest of its
batch. A handler that met a lock held past the daemon's lock timeout (a
producer's open transaction holding the event's key, say) is deferred: left
unacknowledged for a later pass and never set aside, while the rest of the
batch goes on. ``claim_events`` leaves set-aside events out; ``officectl doctor``
lists them and ``office.release_poison`` puts one back. Keyless enqueues
cannot be deduplicated: a redelivered keyless event may add a run (or
coalesce into the first one inside the coalesce window).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict, Field

from controlplane import keys
from controlplane.client import Office
from controlplane.errors import AgentNotAcceptingRuns, AgentNotFound
from controlplane.models import EnqueueResult, Event, EventTopic, KeylessCause

__all__ = [
    "DEFAULT_CONSUMER",
    "DETAIL_MISSING_GENERATION",
    "DETAIL_STORED_RUNNER",
    "EventSubscriber",
    "HandledEvent",
    "HandlerAction",
    "SubscriberReport",
]

# Both names predate this module's: operators' logging configuration names
# the logger, and the events a consumer holds are claimed under its name.
log = logging.getLogger("controlplane.subscriber")

DEFAULT_CONSUMER = "controlplane.subscriber"
REASON_TASK_ASSIGNED = "task_assigned"
DETAIL_MISSING_GENERATION = "event_missing_generation"
DETAIL_STORED_RUNNER = "stored_runner_fallback"
#: ``office.poison``'s name of the subscriber loop.
POISON_LOOP = "subscriber"


class HandlerAction(StrEnum):
    """What handling one event did."""

    ENQUEUED = "enqueued"  # enqueue_run was called: see the result (queued/deduped/coalesced)
    SKIPPED = "skipped"  # a run was due but the agent is gone or does not accept runs
    IGNORED = "ignored"  # nothing to do (see detail)
    FAILED = "failed"  # the handler raised: not acknowledged, delivered again later
    # a lock the handler needed stayed held past the lock timeout (a producer's
    # open transaction): not acknowledged, delivered again later, never set aside
    DEFERRED = "deferred"


class HandledEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    event_id: int
    topic: str
    task_id: str | None = None
    action: HandlerAction
    detail: str | None = None
    agent_profile_id: str | None = None
    idempotency_key: str | None = None
    result: EnqueueResult | None = None

    @property
    def acknowledged(self) -> bool:
        return self.action not in (HandlerAction.FAILED, HandlerAction.DEFERRED)


class SubscriberReport(BaseModel):
    """What one :meth:`EventSubscriber.run_once` did."""

    model_config = ConfigDict(frozen=True)

    claimed: int = 0
    acked: int = 0
    handled: list[HandledEvent] = Field(default_factory=list)
    #: Events set aside by this batch (undecodable, or failed give_up_after times).
    set_aside: list[int] = Field(default_factory=list)

    @property
    def runs_created(self) -> int:
        return sum(1 for h in self.handled if h.result is not None and h.result.created)

    @property
    def failed(self) -> list[HandledEvent]:
        return [h for h in self.handled if h.action is HandlerAction.FAILED]


Handler = Callable[[Event], HandledEvent]


def poison_reason(text: str) -> str:
    """An error text as ``office.set_aside`` stores it: short (the error may
    quote the poison value), one line, no NUL (text cannot hold one)."""
    return " ".join(text.replace("\x00", " ").split())[:1000]


def _generation(value: Any) -> int | None:
    """The generation an event carries, or None when it has none."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


class EventSubscriber:
    """Claims events from the outbox, handles them, acknowledges them.

    ``EventSubscriber(office).run_once(max_rows)`` handles one batch and
    returns a :class:`SubscriberReport`; ``officectl run`` calls it in a loop.
    Several subscribers (in one process or many) may share one outbox: each
    event is claimed by one of them at a time.
    """

    def __init__(
        self,
        office: Office,
        *,
        consumer: str = DEFAULT_CONSUMER,
        visibility: timedelta | float = 30,
        give_up_after: int = 10,
    ) -> None:
        if give_up_after < 1:
            raise ValueError("give_up_after must be at least 1")
        self.office = office
        self.consumer = consumer
        self.visibility = visibility
        self.give_up_after = give_up_after
        self.handlers: dict[str, Handler] = {
            EventTopic.TASK_ASSIGNED.value: self.handle_task_assigned,
        }

    def run_once(self, max_rows: int = 100) -> SubscriberReport:
        """Claim up to ``max_rows`` events, handle each, acknowledge those
        handled; set aside those that cannot be decoded and those that failed
        ``give_up_after`` times."""
        rows = self.office.claim_event_rows(self.consumer, max_rows, self.visibility)
        handled: list[HandledEvent] = []
        set_aside: list[int] = []
        for row in rows:
            try:
                event = row.decode()
            except Exception as exc:
                # Whatever the row's values make Python raise (a payload too
                # deep is a RecursionError, not a ValueError) concerns it alone.
                self.set_aside(row.id, f"undecodable event: {type(exc).__name__}: {exc}")
                set_aside.append(row.id)
                continue
            outcome = self.handle(event)
            handled.append(outcome)
            if outcome.action is HandlerAction.FAILED and event.deliveries >= self.give_up_after:
                self.set_aside(
                    event.id, f"handler failed {event.deliveries} times: {outcome.detail}"
                )
                set_aside.append(event.id)
        done = [h.event_id for h in handled if h.acknowledged]
        acked = self.office.ack_events(done) if done else 0
        return SubscriberReport(
            claimed=len(rows), acked=acked, handled=handled, set_aside=set_aside
        )

    def set_aside(self, event_id: int, reason: str) -> bool:
        """Set an event aside (``office.poison``); True when it was not
        already. The daemon logs and counts it once (``take_poison_reports``)."""
        log.debug("setting event %s aside: %s", event_id, reason, extra={"event_id": event_id})
        return self.office.set_aside(POISON_LOOP, str(event_id), poison_reason(reason))

    def handle(self, event: Event) -> HandledEvent:
        """Handle one event with the handler of its topic; never raises."""
        handler = self.handlers.get(event.topic)
        if handler is None:
            return self._outcome(event, HandlerAction.IGNORED, "no handler for this topic")
        try:
            return handler(event)
        except psycopg.errors.LockNotAvailable as exc:
            # The daemon's lock_timeout: leave the event for a later pass.
            detail = str(exc).strip()
            log.info(
                "event %s (%s) deferred: %s",
                event.id,
                event.topic,
                detail,
                extra={"event_id": event.id, "topic": event.topic, "task_id": event.task_id},
            )
            return self._outcome(event, HandlerAction.DEFERRED, detail)
        except Exception as exc:
            return self._failed(event, exc)

    def _failed(self, event: Event, exc: Exception) -> HandledEvent:
        log.exception(
            "event handler failed for event %s (%s)",
            event.id,
            event.topic,
            extra={"event_id": event.id, "topic": event.topic, "task_id": event.task_id},
        )
        return self._outcome(event, HandlerAction.FAILED, f"{type(exc).__name__}: {exc}")

    def handle_task_assigned(self, event: Event) -> HandledEvent:
        """``task.assigned`` → a ``task_assigned`` run keyed with the event's
        generation (docs/domain.md §2.12)."""
        payload = event.payload
        task_id = payload.get("task_id") or event.task_id
        if not task_id:
            return self._outcome(event, HandlerAction.IGNORED, "event has no task_id")
        task = self.office.get_task(task_id)
        if task is None:
            return self._outcome(event, HandlerAction.IGNORED, "task not found", task_id)
        if not task.is_office:
            return self._outcome(event, HandlerAction.IGNORED, "not an Office task", task_id)

        fell_back = False
        if "agent_profile_id" in payload:
            agent = payload["agent_profile_id"]
        else:
            agent = task.assignee_agent_profile_id
            fell_back = bool(agent)
        if not agent or not isinstance(agent, str):
            return self._outcome(event, HandlerAction.IGNORED, "no assignee to wake", task_id)

        generation = _generation(payload.get("assignment_generation"))
        key: str | None = None
        cause: KeylessCause | None = None
        detail: str | None = None
        if fell_back:
            cause, detail = KeylessCause.UNRESOLVED, DETAIL_STORED_RUNNER
        elif generation is None:
            cause, detail = KeylessCause.UNRESOLVED, DETAIL_MISSING_GENERATION
        else:
            key = keys.assignment_key(task_id, agent, generation)
        run_payload = {} if generation is None else {"assignment_generation": generation}

        # Who caused it, worked out when the event was written (since 0.5.0):
        # by delivery the actor's claim may have ended.
        lineage: dict[str, Any] = {}
        if isinstance(payload.get("origin"), str):
            lineage["origin"] = payload["origin"]
            if isinstance(payload.get("cause_run_id"), str):
                lineage["cause_run_id"] = payload["cause_run_id"]
        try:
            result = self.office.enqueue_run(
                agent,
                REASON_TASK_ASSIGNED,
                run_payload,
                idempotency_key=key,
                task_id=task_id,
                keyless_cause=cause,
                keyless_detail=detail,
                **lineage,
            )
        except (AgentNotFound, AgentNotAcceptingRuns) as exc:
            return self._outcome(
                event, HandlerAction.SKIPPED, exc.message, task_id, agent=agent, key=key
            )
        log.debug(
            "task.assigned event %s: %s",
            event.id,
            result.outcome,
            extra={"event_id": event.id, "task_id": task_id, "key": key},
        )
        return HandledEvent(
            event_id=event.id,
            topic=event.topic,
            task_id=task_id,
            action=HandlerAction.ENQUEUED,
            detail=detail,
            agent_profile_id=agent,
            idempotency_key=key,
            result=result,
        )

    @staticmethod
    def _outcome(
        event: Event,
        action: HandlerAction,
        detail: str,
        task_id: str | None = None,
        *,
        agent: str | None = None,
        key: str | None = None,
    ) -> HandledEvent:
        return HandledEvent(
            event_id=event.id,
            topic=event.topic,
            task_id=task_id or event.task_id,
            action=action,
            detail=detail,
            agent_profile_id=agent,
            idempotency_key=key,
        )
