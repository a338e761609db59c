"""The producers' ledger: every occurrence they made (its key and where its
wake goes), and what they did, for the invariants and the report."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass


@dataclass
class Occurrence:
    """Something that happened once and must wake an agent once: its key,
    where the wake goes, and what the first delivery the demo saw did."""

    kind: str
    key: str
    queue: str  # runs | wakeup
    agent: str | None
    reason: str
    task_id: str | None
    outcome: str | None = None  # None: a trigger produced it (outcome unseen)
    deliveries: int = 1


class Ledger:
    """What the producers did, shared by their threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.occurrences: dict[str, Occurrence] = {}
        self.actions: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []

    def occurred(self, occurrence: Occurrence) -> None:
        with self._lock:
            known = self.occurrences.get(occurrence.key)
            if known is None:
                self.occurrences[occurrence.key] = occurrence
            else:
                known.deliveries += 1
                if known.outcome is None:
                    known.outcome = occurrence.outcome
            self.actions["deliveries"] += 1

    def did(self, action: str, n: int = 1) -> None:
        with self._lock:
            self.actions[action] += n

    def failed(self, where: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[f"{where}: {type(exc).__name__}"] += 1
            if len(self.error_samples) < 10:
                self.error_samples.append(f"{where}: {type(exc).__name__}: {exc}")

    def snapshot(self) -> list[Occurrence]:
        with self._lock:
            return list(self.occurrences.values())
