"""The operations of the run queue and the agents (docs/api.md §2-§3), and raw
statements: one flow each, shared by both clients (see
:mod:`controlplane.client.core`). Their docstrings are the clients' own."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from controlplane.client.core import (
    Call,
    Flow,
    OperationsCore,
    as_interval,
    as_requests,
    bulk_element,
    enqueue_params,
    enqueue_result,
    make_request,
)
from controlplane.client.queries import Query
from controlplane.client.queries import runs as q
from controlplane.errors import DedupIndexHit, OfficeError
from controlplane.models import (
    Agent,
    BulkEnqueueItem,
    DedupKind,
    EnqueueRequest,
    EnqueueResult,
    ExecuteResult,
    KeylessCause,
    Run,
    RunKey,
)

__all__ = ["RunOperations"]


class RunOperations(OperationsCore):
    # the queue ------------------------------------------------------------

    def enqueue_run(
        self,
        agent_profile_id: str,
        reason: str,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        task_id: str | None = None,
        entry_triggered: bool = False,
        keyless_cause: KeylessCause | str | None = None,
        keyless_detail: str | None = None,
        origin: str | None = None,
        cause_run_id: str | None = None,
        priority: int | None = None,
        not_before: datetime | None = None,
    ) -> Flow[EnqueueResult]:
        """``office.enqueue_run``: queued, deduped (windowed/durable),
        coalesced or guarded (the loop guard, since 0.5.0) - never an error
        for a duplicate. ``origin``, ``cause_run_id``, ``priority`` and
        ``not_before`` (docs/api.md §9) need schema 0.5.0."""
        request = make_request(
            agent_profile_id,
            reason,
            payload,
            idempotency_key,
            task_id,
            entry_triggered,
            keyless_cause,
            keyless_detail,
            origin,
            cause_run_id,
            priority,
            not_before,
        )
        with_entry = yield from self.probe("entry_triggered")
        query = q.ENQUEUE_RUN if with_entry else q.ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED
        if request.governed:
            if not (yield from self.probe("origin")):
                raise ValueError(
                    "enqueue_run(origin, cause_run_id, priority, not_before) needs schema 0.5.0"
                )
            query = q.ENQUEUE_RUN_GOVERNED
        try:
            reply = yield Call(query, enqueue_params(request, with_entry))
            result = enqueue_result(reply.rows[0])
        except DedupIndexHit as hit:  # a schema whose enqueue_run lets it through
            dedup = yield from self.dedup_hit(hit, request.idempotency_key)
            result = dedup.as_enqueue_result()
        self.reporter.report_enqueue(request, result)
        return result

    def enqueue_runs(
        self, requests: Iterable[EnqueueRequest | Mapping[str, Any]]
    ) -> Flow[list[BulkEnqueueItem]]:
        """``office.enqueue_runs``: one outcome per request, in input order."""
        checked = as_requests(requests)
        if not checked:
            return []
        with_entry = yield from self.probe("entry_triggered")
        elements = [bulk_element(request, with_entry) for request in checked]
        try:
            params = {"requests": json.dumps(elements)}
            items = yield from self.models(BulkEnqueueItem, q.ENQUEUE_RUNS, params)
        except DedupIndexHit:  # a schema whose enqueue_runs lets it through
            items = yield from self._enqueue_each(checked, with_entry)
        for item in items:
            self.reporter.report_enqueue(checked[item.ordinality - 1], item)
        return items

    def _enqueue_each(
        self, requests: list[EnqueueRequest], with_entry: bool
    ) -> Flow[list[BulkEnqueueItem]]:
        """The bulk call element by element, in one transaction, each element
        behind a savepoint so a dedup-index hit becomes its outcome; any
        other error rolls everything back (the bulk contract)."""
        query = q.ENQUEUE_RUN if with_entry else q.ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED
        items: list[BulkEnqueueItem] = []
        yield Call(q.BEGIN)
        try:
            for ordinality, request in enumerate(requests, start=1):
                yield Call(q.SAVEPOINT_ELEMENT)
                try:
                    reply = yield Call(query, enqueue_params(request, with_entry))
                    result = enqueue_result(reply.rows[0])
                except DedupIndexHit as hit:
                    yield Call(q.ROLLBACK_TO_ELEMENT)
                    dedup = yield from self.dedup_hit(hit, request.idempotency_key)
                    result = dedup.as_enqueue_result()
                except OfficeError as exc:
                    raise type(exc)(
                        f"element {ordinality}: {exc.message}", sqlstate=exc.sqlstate
                    ) from exc
                items.append(BulkEnqueueItem(ordinality=ordinality, **result.model_dump()))
            yield Call(q.COMMIT)
        except Exception:
            yield Call(q.ROLLBACK)
            raise
        return items

    def claim_run(
        self, worker_id: str | None = None, agent_profile_id: str | None = None
    ) -> Flow[Run | None]:
        """The claimed run (``attempt`` is the fencing token), or None."""
        params = {"worker_id": worker_id, "agent_profile_id": agent_profile_id}
        return (yield from self.first(Run, q.CLAIM_RUN, params))

    # Leases and run lookups (0.4.0), with their fallbacks on an older schema.

    def heartbeat_run(self, run_id: str, attempt: int, worker_id: str | None = None) -> Flow[bool]:
        """``office.heartbeat_run``: renew the lease on a claimed run (the
        recovery threshold counts from the last heartbeat). False: the run is
        no longer this claim's (recovered, cancelled, re-claimed, or put back
        because its agent's or workspace's budget is reached) - stop working
        on it. ``worker_id``: see :meth:`_fenced`."""
        leases = yield from self.probe("heartbeat_at")
        if not leases:
            params = {"run_id": run_id, "attempt": attempt}
            return (yield from self.changed(q.HEARTBEAT_RUN_WITHOUT_LEASES, params))
        return (yield from self.lease_heartbeat(run_id, attempt, worker_id))

    def lease_heartbeat(
        self, run_id: str, attempt: int, worker_id: str | None = None
    ) -> Flow[bool]:
        """``office.heartbeat_run`` without the lease probe (a worker needs
        leases, and a probe failed in an outage must not turn them off)."""
        params: dict[str, object] = {"run_id": run_id, "attempt": attempt}
        query = yield from self._fenced(q.HEARTBEAT_RUN, q.HEARTBEAT_RUN_FENCED, params, worker_id)
        return (yield from self.changed(query, params))

    def _fenced(
        self, plain: Query, fenced: Query, params: dict[str, object], worker_id: str | None
    ) -> Flow[Query]:
        """The outcome call to make: with a ``worker_id`` on a schema whose
        outcome calls take one (since 0.5.0), the one that also requires the
        run to be claimed by that worker (``params`` gains it); else the one
        fenced by the attempt alone, which is all an older schema has. Probed
        once per client; a probe that fails raises, and is asked again."""
        if worker_id is None or not (yield from self._has_worker_fence()):
            return plain
        params["worker_id"] = worker_id
        return fenced

    def _has_worker_fence(self) -> Flow[bool]:
        if self.worker_fence is None:
            reply = yield Call(q.PROBE_WORKER_FENCE, {})
            self.worker_fence = bool(reply.rows)
        return self.worker_fence

    def get_run(self, run_id: str) -> Flow[Run | None]:
        """``office.get_run``: the run, or None."""
        leases = yield from self.probe("heartbeat_at")
        query = q.GET_RUN if leases else q.GET_RUN_WITHOUT_LEASES
        return (yield from self.first(Run, query, {"run_id": run_id}))

    def run_keys(self, run_id: str) -> Flow[list[RunKey]]:
        """``office.run_keys``: the keys the run serves, oldest first - its
        own and those it absorbed by coalescing."""
        leases = yield from self.probe("heartbeat_at")
        query = q.RUN_KEYS if leases else q.RUN_KEYS_WITHOUT_LEASES
        return (yield from self.models(RunKey, query, {"run_id": run_id}))

    def has_leases(self) -> Flow[bool]:
        """Whether the schema has leases (``office.runs.heartbeat_at`` and
        ``heartbeat_run``, since 0.4.0): probed once per client; absent is
        logged once per process (ERROR)."""
        return (yield from self.probe("heartbeat_at"))

    def finish_run(self, run_id: str, attempt: int, worker_id: str | None = None) -> Flow[bool]:
        """``office.finish_run``: True if this claim (``attempt``, and
        ``worker_id`` if given: see :meth:`_fenced`) finished it."""
        params: dict[str, object] = {"run_id": run_id, "attempt": attempt}
        query = yield from self._fenced(q.FINISH_RUN, q.FINISH_RUN_FENCED, params, worker_id)
        return (yield from self.changed(query, params))

    def fail_run(
        self,
        run_id: str,
        attempt: int,
        error_message: str,
        *,
        retryable: bool = False,
        worker_id: str | None = None,
    ) -> Flow[bool]:
        """``office.fail_run``: True if this claim failed it, or (``retryable``,
        since 0.5.0, while retries are left) put it back with a back-off."""
        params: dict[str, object] = {
            "run_id": run_id,
            "attempt": attempt,
            "error_message": error_message,
        }
        if retryable:
            # The same probe as the fence: both arguments arrived in 0.5.0.
            if not (yield from self._has_worker_fence()):
                raise ValueError(
                    "fail_run(retryable=True) needs schema 0.5.0: this database's"
                    " office.fail_run has no retryable argument"
                )
            params.update(retryable=True, worker_id=worker_id)
            return (yield from self.changed(q.FAIL_RUN_FENCED, params))
        query = yield from self._fenced(q.FAIL_RUN, q.FAIL_RUN_FENCED, params, worker_id)
        if query is q.FAIL_RUN_FENCED:
            params["retryable"] = False
        return (yield from self.changed(query, params))

    def retry_run(
        self, run_id: str, attempt: int, delay: timedelta | float, worker_id: str | None = None
    ) -> Flow[bool]:
        """``office.retry_run``: back to the queue after ``delay`` (seconds
        or a timedelta); True if this claim was the run's."""
        params: dict[str, object] = {
            "run_id": run_id,
            "attempt": attempt,
            "delay": as_interval(delay),
        }
        query = yield from self._fenced(q.RETRY_RUN, q.RETRY_RUN_FENCED, params, worker_id)
        return (yield from self.changed(query, params))

    def cancel_run(self, run_id: str, reason: str) -> Flow[bool]:
        """``office.cancel_run``: True if the run was open and is now cancelled."""
        return (yield from self.changed(q.CANCEL_RUN, {"run_id": run_id, "reason": reason}))

    def cancel_runs(self, run_ids: Sequence[str], reason: str) -> Flow[int]:
        """``office.cancel_runs`` (since 0.5.0): each queued or claimed run of
        ``run_ids`` cancelled, in one statement; how many (at most 10,000 ids)."""
        params = {"run_ids": list(run_ids), "reason": reason}
        return (yield from self.count(q.CANCEL_RUNS, params))

    def requeue_run(self, run_id: str) -> Flow[bool]:
        """``office.requeue_run`` (since 0.5.0): True if the run was failed or
        cancelled and is queued again (same row, same key; its next claim
        bumps the attempt)."""
        return (yield from self.changed(q.REQUEUE_RUN, {"run_id": run_id}))

    def requeue_runs(self, run_ids: Sequence[str]) -> Flow[int]:
        """``office.requeue_runs`` (since 0.5.0): ``requeue_run`` for each of
        ``run_ids``, in one statement; how many (at most 10,000 ids)."""
        return (yield from self.count(q.REQUEUE_RUNS, {"run_ids": list(run_ids)}))

    def recover_stale_runs(self, older_than: timedelta | float) -> Flow[int]:
        """``office.recover_stale_runs``: claimed runs without a heartbeat for
        ``older_than`` go back to the queue; how many."""
        params = {"older_than": as_interval(older_than)}
        return (yield from self.count(q.RECOVER_STALE_RUNS, params))

    def prune_runs(self, older_than: timedelta | float) -> Flow[int]:
        """``office.prune_runs``: finished runs older than ``older_than``
        deleted (their keys are free again); how many."""
        return (yield from self.count(q.PRUNE_RUNS, {"older_than": as_interval(older_than)}))

    # agents -----------------------------------------------------------------

    def upsert_agent(
        self, id: str, workspace_id: str, name: str = "", status: str = "idle"
    ) -> Flow[Agent]:
        """``office.upsert_agent``: the agent profile, created or updated."""
        params = {"id": id, "workspace_id": workspace_id, "name": name, "status": status}
        return (yield from self.one(Agent, q.UPSERT_AGENT, params))

    def set_agent_status(self, id: str, status: str) -> Flow[Agent]:
        """``office.set_agent_status``: the agent with its new status."""
        return (yield from self.one(Agent, q.SET_AGENT_STATUS, {"id": id, "status": status}))

    # the schema and raw statements ------------------------------------------

    def schema_version(self) -> Flow[str]:
        """``office.schema_version()``: the version of the installed schema."""
        return str((yield from self.value(q.SCHEMA_VERSION)))

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Flow[ExecuteResult]:
        """Run one raw statement (``%(name)s`` parameters) through the same
        error translation: a hit on a dedup index is returned as
        ``ExecuteResult.dedup`` (counted and logged), never raised. Each call
        is its own transaction, and session state it sets (``SET``,
        ``LISTEN``, session advisory locks) is reset when it returns."""
        query = Query(sql, parametrized=params is not None)
        try:
            reply = yield Call(query, params or {}, rowcount=True)
        except DedupIndexHit as hit:
            dedup = yield from self.dedup_hit(hit)
            self.reporter.report_dedup(
                queue=dedup.queue,
                reason=dedup.reason or "unknown",
                kind=DedupKind.DURABLE,
                key=dedup.key,
                agent_profile_id=dedup.agent_profile_id,
            )
            return ExecuteResult(dedup=dedup)
        return ExecuteResult(rows=reply.rows, rowcount=reply.rowcount)
