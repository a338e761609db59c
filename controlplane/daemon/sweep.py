"""The stuck-parent sweep loop (docs/domain.md §2.20): ``sweep_stuck_parents``
every ``sweep_interval`` (default 30 s), ``sweep_batch`` parents a call (5,
as the original's reconciler). A call that delivered a full batch is
followed by another at once, so a backlog drains without waiting a tick per
five parents. The client counts candidates, emitted wakes and unresolved
assignees (``office_parent_wake_*_total``). A parent whose reconcile raises
is set aside by the sweep itself (``office.poison``, loop ``sweep``) and left
out of the next ones."""

from __future__ import annotations

from typing import Any

from controlplane.daemon.loop import Loop

__all__ = ["SweepLoop"]


class SweepLoop(Loop):
    name = "sweep"
    poison_kind = "parent task"

    def __init__(self, *args: Any, batch: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch = batch
        self.delivered = 0

    def iterate(self) -> bool:
        results = self.office.sweep_stuck_parents(self.batch)
        delivered = sum(1 for r in results if r.delivered)
        self.delivered += delivered
        return len(results) >= self.batch and delivered > 0
