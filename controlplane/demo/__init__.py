"""``officectl demo`` (``make demo``): racing producers against the control
plane, then the database's own account of what it decided, and the
invariants checked from the database.

Setup: a workspace with agents, a task tree (parents with children, tasks
with two blockers each, hot tasks to reassign), heavy and lightweight
routines. Then the control plane starts in process
(:class:`controlplane.daemon.Daemon`: subscriber, wakeups, cron, sweep,
recovery) and for ``seconds`` these race, each thread on its own connection:

* ``reassign`` - assign_task of hot tasks to agent after agent (each
  assignment an occurrence, delivered again by the event subscriber);
* ``redeliver`` - handles already acknowledged ``task.assigned`` events a
  second time (a consumer that lost its acknowledgement);
* ``comment`` - comment wakes (``task_comment:<comment>:<agent>``) delivered
  twice at once; ``late-redeliver`` delivers old ones again after their
  dedup window (``office.idempotency_window`` of 1 ms on its connection):
  the durable index stops them;
* ``complete-1..3`` - complete the blockers of blocked tasks and the children
  of parents in parallel, reopen and recomplete one of each, reset, again;
* ``schedule-1..2`` - add cron triggers already due to lightweight routines
  and run cron loops of their own against the daemon's (one winner a tick);
  ``refire`` fires claimed ticks a second time;
* ``fire`` - manual fires of heavy routines (skip_if_active,
  coalesce_if_active) and of a lightweight skip_if_active routine, and now and
  then completes the routines' tasks;
* ``heartbeat`` - keyless wakes of an agent whose worker is offline (they
  coalesce);
* ``worker-<agent>`` - the worker fleet: a :class:`controlplane.worker.Worker`
  per agent served, whose handler works a few milliseconds and finishes most
  runs, retries some (``Retry``) and fails some (an exception); before the
  race, one more ``Worker`` claims a run and freezes (its handler hangs, it
  sends no heartbeat): the daemon's recover_stale_runs returns the claim to
  the queue, the fleet settles it, and when the frozen worker comes back its
  late finish is refused (fenced by the attempt).

After the race, while the control plane still runs, the wake governance
scenes (:mod:`controlplane.demo.governance`): a ping-pong of two agents
guarded at ``office.max_chain_depth``, a burst of wakes during a cooldown
that becomes one held run per bucket, and a budget that stops a run in
progress.

At the end: the outbox drained, a final sweep, then the report - occurrences,
runs created, deduped (windowed / durable), coalesced, skipped by policy,
from ``office.dedup_stats`` and the tables - and the invariants: one run per
key; from the producers' side, every occurrence has exactly one run carrying
its key or was coalesced into one; no stuck parent after the final sweep; no
routine gate held by a terminal task; every event handled; the dead worker's
claim recovered and its late finish refused; the ping-pong guarded, the
burst held, the budget's stop.
"""

from controlplane.demo.invariants import Invariant
from controlplane.demo.report import DemoReport
from controlplane.demo.run import run_demo

__all__ = ["DemoReport", "Invariant", "run_demo"]
