"""office 0.5.0: the hardening of 0.4.0's red-team findings (JSON depth and
bulk bounds, every isolation level served once, fenced outcome calls, requeue)
and wake governance."""

from controlplane.migrate import upgrade_step

__depends__ = {"0004.office-0.4.0"}

steps = [upgrade_step("0.4.0", "0.5.0")]
