"""office 0.4.0: hostile-install hardening, bounds on every stored value, the
event actor, workspace isolation, remembered keys, leases with heartbeats and
the claim that never fails."""

from controlplane.migrate import upgrade_step

__depends__ = {"0003.office-0.3.0"}

steps = [upgrade_step("0.3.0", "0.4.0")]
