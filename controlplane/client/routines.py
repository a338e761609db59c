"""The operations of routines and wakeup requests (docs/api.md §4): one flow
each, shared by both clients (see :mod:`controlplane.client.core`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controlplane.client.core import Flow, OperationsCore
from controlplane.client.queries import routines as q
from controlplane.models import (
    CatchUpPolicy,
    ConcurrencyPolicy,
    DedupKind,
    DedupQueue,
    DispatchRoutineResult,
    Routine,
    RoutineSource,
    RoutineTerminal,
    RoutineTickResult,
    RoutineTrigger,
    WakeupDispatchResult,
    WakeupOutcome,
    WakeupResult,
)

__all__ = ["RoutineOperations"]


class RoutineOperations(OperationsCore):
    # routines -----------------------------------------------------------------

    def create_routine(
        self,
        workspace_id: str,
        name: str,
        task_template: Mapping[str, Any] | None = None,
        assignee_agent_profile_id: str | None = None,
        concurrency_policy: ConcurrencyPolicy | str = ConcurrencyPolicy.SKIP_IF_ACTIVE,
        variables: Mapping[str, Any] | None = None,
        id: str | None = None,
        catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
        catch_up_max: int = 25,
    ) -> Flow[Routine]:
        """``office.create_routine``: a template with a title makes it heavy
        (fires create tasks), else lightweight (fires wake the assignee);
        ``variables`` declares ``{name: {"default": value}}``."""
        params = {
            "workspace_id": workspace_id,
            "name": name,
            "task_template": json.dumps(dict(task_template or {})),
            "assignee_agent_profile_id": assignee_agent_profile_id,
            "concurrency_policy": str(concurrency_policy),
            "variables": json.dumps(dict(variables or {})),
            "id": id,
            "catch_up_policy": str(catch_up_policy),
            "catch_up_max": catch_up_max,
        }
        return (yield from self.one(Routine, q.CREATE_ROUTINE, params))

    def add_routine_trigger(
        self,
        routine_id: str,
        cron_expression: str,
        timezone: str = "UTC",
        next_run_at: datetime | None = None,
        id: str | None = None,
    ) -> Flow[RoutineTrigger]:
        """``office.add_routine_trigger``: a cron trigger (``next_run_at``
        None: armed by the cron loop, :mod:`controlplane.daemon.cron`)."""
        params = {
            "routine_id": routine_id,
            "cron_expression": cron_expression,
            "timezone": timezone,
            "next_run_at": next_run_at,
            "id": id,
        }
        return (yield from self.one(RoutineTrigger, q.ADD_ROUTINE_TRIGGER, params))

    def claim_routine_tick(
        self,
        trigger_id: str,
        observed_next_run_at: datetime | None,
        following_next_run_at: datetime,
    ) -> Flow[bool]:
        """``office.claim_routine_tick``: the compare-and-swap on
        ``next_run_at``; True for the one caller that won the tick. (To claim
        a due tick and dispatch it, use :meth:`fire_routine_tick`: one
        transaction, so a crash between the two cannot lose the tick.)"""
        params = {
            "trigger_id": trigger_id,
            "observed_next_run_at": observed_next_run_at,
            "following_next_run_at": following_next_run_at,
        }
        return (yield from self.changed(q.CLAIM_ROUTINE_TICK, params))

    def fire_routine_tick(
        self,
        trigger_id: str,
        observed_next_run_at: datetime,
        following_next_run_at: datetime,
        missed_ticks: int | None = None,
        missed_since: datetime | None = None,
        missed_truncated: bool | None = None,
    ) -> Flow[RoutineTickResult]:
        """``office.fire_routine_tick``: claim the tick (observed → following)
        and dispatch it with the claimed tick in ONE transaction. Not
        claimed: another caller won it. A dispatch that raised keeps the
        claim (the tick is spent) and comes back with its error."""
        params = {
            "trigger_id": trigger_id,
            "observed": observed_next_run_at,
            "following": following_next_run_at,
            "missed_ticks": missed_ticks,
            "missed_since": missed_since,
            "missed_truncated": missed_truncated,
        }
        return (yield from self.one(RoutineTickResult, q.FIRE_ROUTINE_TICK, params))

    def dispatch_routine(
        self,
        routine_id: str,
        source: RoutineSource | str,
        variables: Mapping[str, Any] | None = None,
        trigger_id: str | None = None,
        claimed_tick: datetime | None = None,
        explicit_key: str | None = None,
        missed_ticks: int | None = None,
        missed_since: datetime | None = None,
        missed_truncated: bool | None = None,
    ) -> Flow[DispatchRoutineResult]:
        """``office.dispatch_routine``: one fire; skipped, coalesced and a
        failed wakeup dispatch are statuses of the result, not errors."""
        params = {
            "routine_id": routine_id,
            "source": str(source),
            "variables": json.dumps(dict(variables or {})),
            "trigger_id": trigger_id,
            "claimed_tick": claimed_tick,
            "explicit_key": explicit_key,
            "missed_ticks": missed_ticks,
            "missed_since": missed_since,
            "missed_truncated": missed_truncated,
        }
        result = yield from self.one(DispatchRoutineResult, q.DISPATCH_ROUTINE, params)
        self.reporter.report_dispatch(routine_id, str(source), result)
        return result

    def close_routine_run(self, routine_run_id: str, terminal: RoutineTerminal | str) -> Flow[bool]:
        """``office.close_routine_run``: the conditional close (only while
        ``task_created``); True if this call closed the run."""
        params = {"routine_run_id": routine_run_id, "terminal": str(terminal)}
        return (yield from self.changed(q.CLOSE_ROUTINE_RUN, params))

    def sync_routine_run_status(self, task_id: str, terminal: RoutineTerminal | str) -> Flow[bool]:
        """``office.sync_routine_run_status``: closes the newest run linked to
        the task ('' is a no-op)."""
        params = {"task_id": task_id, "terminal": str(terminal)}
        return (yield from self.changed(q.SYNC_ROUTINE_RUN_STATUS, params))

    # wakeup requests ------------------------------------------------------------

    def request_wakeup(
        self,
        agent_profile_id: str,
        source: str,
        reason: str = "",
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Flow[WakeupResult]:
        """``office.request_wakeup``: queued, or deduped (durable) on the key."""
        params = {
            "agent_profile_id": agent_profile_id,
            "source": source,
            "reason": reason,
            "payload": json.dumps(dict(payload or {})),
            "idempotency_key": idempotency_key,
        }
        result = yield from self.one(WakeupResult, q.REQUEST_WAKEUP, params)
        if result.outcome is WakeupOutcome.DEDUPED:
            self.reporter.report_dedup(
                queue=DedupQueue.WAKEUP,
                reason=reason,
                kind=DedupKind.DURABLE,
                key=idempotency_key,
                agent_profile_id=agent_profile_id,
            )
        return result

    def dispatch_wakeup(self, wakeup_request_id: str) -> Flow[WakeupDispatchResult]:
        """``office.dispatch_wakeup``: claimed, coalesced, skipped or noop;
        an agent that does not accept runs is ``AgentNotAcceptingRuns``."""
        params = {"wakeup_request_id": wakeup_request_id}
        return (yield from self.one(WakeupDispatchResult, q.DISPATCH_WAKEUP, params))

    def fail_wakeup(self, wakeup_request_id: str, reason: str) -> Flow[bool]:
        """``office.fail_wakeup``: only a queued request fails."""
        params = {"wakeup_request_id": wakeup_request_id, "reason": reason}
        return (yield from self.changed(q.FAIL_WAKEUP, params))
