"""``officectl demo``: see :mod:`controlplane.demo.run`."""

from controlplane.demo.run import DemoReport, Invariant, run_demo

__all__ = ["DemoReport", "Invariant", "run_demo"]
