"""``officectl run``: the control plane's background work, one thread per
loop (see :mod:`controlplane.daemon.supervisor`):

* ``subscriber`` - the event outbox → keyed ``task_assigned`` runs;
* ``wakeups`` - queued wakeup requests → runs (dispatch_wakeup);
* ``cron`` - due routine ticks → claimed and dispatched fires;
* ``sweep`` - stuck parents → children-completed wakes;
* ``recovery`` - stale claims → back to the queue;
* ``prune`` - old finished runs and acknowledged events → deleted;
* ``stats`` - gauges (outbox lag, queue sizes) for Prometheus.
"""

from controlplane.daemon.config import LOOP_NAMES, DaemonConfig, parse_duration
from controlplane.daemon.logs import configure_logging
from controlplane.daemon.supervisor import Daemon

__all__ = ["LOOP_NAMES", "Daemon", "DaemonConfig", "configure_logging", "parse_duration"]
