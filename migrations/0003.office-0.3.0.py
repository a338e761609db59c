"""office 0.3.0: tasks, blockers, assignment generations, terminal effects and the event outbox."""

from controlplane.migrate import upgrade_step

__depends__ = {"0002.office-0.2.0"}

steps = [upgrade_step("0.2.0", "0.3.0")]
