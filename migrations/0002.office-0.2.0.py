"""office 0.2.0: runs.entry_triggered and enqueue_run(entry_triggered)."""

from controlplane.migrate import upgrade_step

__depends__ = {"0001.office-0.1.0"}

steps = [upgrade_step("0.1.0", "0.2.0")]
