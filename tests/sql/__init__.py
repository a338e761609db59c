"""The SQL API against real PostgreSQL: one capability per module (runs,
tasks, blockers, events, routines, wakeups, parent wakes, agents, stats),
its races and isolation specs, hardening and the fuzzed catalog."""
