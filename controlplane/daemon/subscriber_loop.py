"""The subscriber loop: consumes the event outbox with
:class:`controlplane.event_subscriber.EventSubscriber` (``task.assigned`` →
``task_assigned`` runs keyed by the event's generation).

An iteration claims one batch, handles every event of it and acknowledges
them; a stop request is honoured between batches, so a stopping daemon holds
no claimed event. Should the process die mid-batch anyway, the unacknowledged
events come back after their visibility timeout and their keys make the
redelivery a dedup. An event that cannot be decoded, or whose handler failed
on every delivery, is set aside by the subscriber (``office.poison``).
"""

from __future__ import annotations

from typing import Any

from controlplane.daemon.loop import Loop
from controlplane.event_subscriber import EventSubscriber, SubscriberReport

__all__ = ["SubscriberLoop"]


class SubscriberLoop(Loop):
    name = "subscriber"
    poison_kind = "event"

    def __init__(
        self, *args: Any, consumer: str, batch: int, visibility: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.batch = batch
        self.subscriber = EventSubscriber(self.office, consumer=consumer, visibility=visibility)
        self.last_report: SubscriberReport | None = None

    def iterate(self) -> bool:
        report = self.subscriber.run_once(self.batch)
        self.last_report = report
        for handled in report.handled:
            self.metrics.events.labels(topic=handled.topic, action=handled.action.value).inc()
        return report.claimed >= self.batch
