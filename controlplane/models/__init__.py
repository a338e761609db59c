"""The typed results of the office SQL API, one module per capability, for
both Python clients. Pure: pydantic models and enums, no I/O, no import of
any other controlplane module but :mod:`controlplane.models` itself.

A duplicate or a coalesce is an *outcome*, never an error: every enqueue
returns an :class:`EnqueueResult` and only ``queued`` means that a run was
created (docs/domain.md §2.1).

* :mod:`~controlplane.models.common` - queue outcomes and dedup kinds;
* :mod:`~controlplane.models.runs` - enqueue requests and results, runs, keys;
* :mod:`~controlplane.models.agents` - agent profiles;
* :mod:`~controlplane.models.tasks` - tasks and the producers' results;
* :mod:`~controlplane.models.events` - the outbox;
* :mod:`~controlplane.models.parent_wake` - stuck parents and reconciles;
* :mod:`~controlplane.models.routines` - routines, triggers, dispatches;
* :mod:`~controlplane.models.wakeups` - wakeup requests;
* :mod:`~controlplane.models.policies` - wake policies;
* :mod:`~controlplane.models.daemon` - what the daemon's loops read;
* :mod:`~controlplane.models.dashboard` - what the dashboard's pages list.
"""

from controlplane.models.agents import Agent, AgentStatus
from controlplane.models.common import DedupKind, DedupQueue, KeylessCause, QueueOutcome
from controlplane.models.daemon import (
    DaemonStats,
    DedupStat,
    DueTrigger,
    PoisonReport,
    QueuedWakeupDispatch,
    QueueStat,
    RoutineTickResult,
)
from controlplane.models.dashboard import (
    QUEUE_COUNT_CAP,
    AgentQueue,
    ParentReceipt,
    RoutineRunSummary,
    RoutineSummary,
    RunStatusCount,
    TriggerSummary,
    WakeupRequest,
)
from controlplane.models.events import ClaimedEventRow, Event, EventTopic
from controlplane.models.parent_wake import (
    CHILDREN_COMPLETED,
    ReconcileResult,
    SkippedReason,
    StuckParent,
)
from controlplane.models.policies import (
    BudgetPeriod,
    BudgetUsage,
    GovernanceHold,
    GovernanceSnapshot,
    PolicyScope,
    RunExplanation,
    WakePolicy,
)
from controlplane.models.routines import (
    CatchUpPolicy,
    ConcurrencyPolicy,
    DispatchRoutineResult,
    Routine,
    RoutineRunStatus,
    RoutineSource,
    RoutineStatus,
    RoutineTerminal,
    RoutineTrigger,
)
from controlplane.models.runs import (
    BulkEnqueueItem,
    DedupHit,
    EnqueueRequest,
    EnqueueResult,
    ExecuteResult,
    Run,
    RunKey,
    RunKeyHow,
    RunStatus,
)
from controlplane.models.tasks import (
    TASK_STATES,
    TERMINAL_STATES,
    ActorType,
    AssignResult,
    ProducerOutcome,
    Task,
    TaskResult,
    TaskState,
    TaskTerminalStatus,
)
from controlplane.models.wakeups import (
    WakeupDispatchResult,
    WakeupDispatchStatus,
    WakeupOutcome,
    WakeupResult,
    WakeupStatus,
)

__all__ = [
    "CHILDREN_COMPLETED",
    "QUEUE_COUNT_CAP",
    "TASK_STATES",
    "TERMINAL_STATES",
    "ActorType",
    "Agent",
    "AgentQueue",
    "AgentStatus",
    "AssignResult",
    "BudgetPeriod",
    "BudgetUsage",
    "BulkEnqueueItem",
    "CatchUpPolicy",
    "ClaimedEventRow",
    "ConcurrencyPolicy",
    "DaemonStats",
    "DedupHit",
    "DedupKind",
    "DedupQueue",
    "DedupStat",
    "DispatchRoutineResult",
    "DueTrigger",
    "EnqueueRequest",
    "EnqueueResult",
    "Event",
    "EventTopic",
    "ExecuteResult",
    "GovernanceHold",
    "GovernanceSnapshot",
    "KeylessCause",
    "ParentReceipt",
    "PoisonReport",
    "PolicyScope",
    "ProducerOutcome",
    "QueueOutcome",
    "QueueStat",
    "QueuedWakeupDispatch",
    "ReconcileResult",
    "Routine",
    "RoutineRunStatus",
    "RoutineRunSummary",
    "RoutineSource",
    "RoutineStatus",
    "RoutineSummary",
    "RoutineTerminal",
    "RoutineTickResult",
    "RoutineTrigger",
    "Run",
    "RunExplanation",
    "RunKey",
    "RunKeyHow",
    "RunStatus",
    "RunStatusCount",
    "SkippedReason",
    "StuckParent",
    "Task",
    "TaskResult",
    "TaskState",
    "TaskTerminalStatus",
    "TriggerSummary",
    "WakePolicy",
    "WakeupDispatchResult",
    "WakeupDispatchStatus",
    "WakeupOutcome",
    "WakeupRequest",
    "WakeupResult",
    "WakeupStatus",
]
