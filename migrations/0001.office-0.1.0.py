"""office 0.1.0: the first schema, from nothing."""

from controlplane.migrate import version_step

steps = [version_step("0.1.0")]
