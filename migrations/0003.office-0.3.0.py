"""office 0.3.0: tasks, blockers, assignment generations, terminal effects, the event
outbox, routines and wakeup requests, parent wakes, and what the daemon needs."""

from controlplane.migrate import upgrade_step

__depends__ = {"0002.office-0.2.0"}

steps = [upgrade_step("0.2.0", "0.3.0")]
