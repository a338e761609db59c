"""The long-running processes: ``officectl run`` (its loops, faults, poison
events, cron), the event subscriber, and the worker (library and CLI)."""
