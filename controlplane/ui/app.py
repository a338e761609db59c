"""The dashboard's Starlette application: server-rendered pages (Jinja2,
autoescaped), a stylesheet and one small script shipped in the package (the
live refresh and the copy buttons; every page works without it).

Reads go through :class:`controlplane.ui.queries.Dashboard`; actions call the
client's typed methods, only when the app was built with ``allow_actions``
and the connected role may call the function, each a POST carrying the
app's CSRF token after a confirmation page. A database that cannot be reached
is a banner (503), a read the role is not granted is a message (403): never a
traceback, and no page ever shows the DSN. Who may ask is
:mod:`controlplane.ui.guard`.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import psycopg
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from controlplane.cli.base import describe
from controlplane.errors import OfficeError
from controlplane.models import AgentStatus, RoutineSource, Run
from controlplane.ui import chart, display
from controlplane.ui.database import CONNECT_TIMEOUT, Database, DatabaseDown
from controlplane.ui.guard import Guard, served_hosts
from controlplane.ui.json_display import as_json
from controlplane.ui.queries import (
    ACTION_FUNCTIONS,
    PAGE_SIZE,
    Dashboard,
    NotVisible,
    RunFilter,
)

log = logging.getLogger("office.ui")

HERE = Path(__file__).parent
#: The causes a run's page walks up at most (one primary-key read each);
#: office.max_chain_depth defaults to 20.
CAUSE_CHAIN_SHOWN = 25


def id_url(prefix: str, value: object) -> str:
    """The URL of the page of the entity ``value`` under ``prefix``
    (``/tasks/``): the id is one path segment with every reserved character
    encoded, ``/`` too, so ``../actions/sweep`` is a task's page and never the
    sweep's. A browser resolves a segment that is ``.`` or ``..`` (encoded or
    not) before it asks, so such an id goes in the query instead."""
    text = str(value)
    if text in (".", ".."):
        return f"{prefix}?id={quote(text, safe='')}"
    return prefix + quote(text, safe="")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["ago"] = display.ago
    env.filters["utc"] = display.utc
    env.filters["iso"] = display.iso
    env.filters["short_id"] = display.short_id
    env.filters["badge"] = display.badge
    env.filters["label"] = display.label
    env.filters["json"] = as_json
    env.globals["id_url"] = id_url
    return env


def entity_id(request: Request, name: str) -> str:
    """The id of a detail page: its path (decoded, so ``%2F`` is a ``/`` of
    the id), or the ``id`` parameter :func:`id_url` uses for ``.`` and ``..``."""
    return str(request.path_params[name]) or request.query_params.get("id", "")


class UI:
    """The state of one dashboard: its database, CSRF token, sampler."""

    def __init__(self, dsn: str, *, allow_actions: bool, timeout: float) -> None:
        self.database = Database(dsn, timeout)
        self.allow_actions = allow_actions
        self.csrf = secrets.token_urlsafe(32)
        self.sampler = chart.Sampler()
        self.env = _environment()

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        body = self.env.get_template(name).render(
            request=request, now=datetime.now(UTC), allow_actions=self.allow_actions, **context
        )
        return HTMLResponse(body, status_code=status)

    def page(self, build: Callable[[Request, Dashboard], Response]) -> Callable[..., Any]:
        """A route whose reads may fail: the database's absence is the banner,
        a refused read the "not visible" message."""

        def endpoint(request: Request) -> Response:
            try:
                with self.database.dashboard() as dash:
                    return build(request, dash)
            except DatabaseDown as exc:
                log.warning("database down: %s", exc)
                return self.render(request, "down.html", status=503)
            except NotVisible as exc:
                return self.render(request, "not_visible.html", status=403, detail=str(exc))
            except (OfficeError, psycopg.Error) as exc:
                # A value the server or the client refused (a malformed
                # filter, say): its one line, not a traceback.
                log.warning("page failed: %s", exc)
                return self.render(request, "refused.html", status=400, why=describe(exc))

        return endpoint

    # --- pages -------------------------------------------------------------

    def overview(self, request: Request, dash: Dashboard) -> Response:
        queue = dash.queue_stats()
        dedup = dash.dedup_stats()
        keyless = dash.keyless_stats()
        daemon = dash.daemon_stats()
        totals = {
            "queued": sum(row.runs for row in queue),
            "deduped": sum(
                row.total for row in dedup if row.queue == "runs" and row.kind != "coalesced"
            ),
            "coalesced": sum(row.total for row in dedup if row.kind == "coalesced"),
        }
        self.sampler.record(datetime.now(UTC), totals)
        return self.render(
            request,
            "overview.html",
            conn=dash.connection(),
            queue=queue,
            dedup=dedup,
            keyless=keyless,
            daemon=daemon,
            chart=chart.render(self.sampler.samples()),
        )

    def runs(self, request: Request, dash: Dashboard) -> Response:
        q = request.query_params
        filters = RunFilter(
            status=q.get("status", ""),
            agent=q.get("agent", ""),
            reason=q.get("reason", ""),
            task=q.get("task", ""),
            key_prefix=q.get("key_prefix", ""),
        )
        page = dash.runs(filters, q.get("before") or None)
        next_query = None
        if page.next_before:
            params = {k: v for k, v in filters.model_dump().items() if v}
            params["before"] = page.next_before
            next_query = params
        return self.render(request, "runs.html", filters=filters, page=page, next_query=next_query)

    def run(self, request: Request, dash: Dashboard) -> Response:
        run_id = entity_id(request, "run_id")
        if not run_id:
            return RedirectResponse("/runs")
        run = dash.office.get_run(run_id)
        if run is None:
            return self.render(request, "missing.html", status=404, what="run", id=run_id)
        chain, cut = self.cause_chain(dash, run)
        return self.render(
            request,
            "run.html",
            run=run,
            keys=dash.office.run_keys(run_id),
            chain=chain,
            chain_cut=cut,
            may_cancel=self.allow_actions
            and run.status in ("queued", "claimed")
            and dash.may_call("cancel_run"),
            may_requeue=self.allow_actions
            and run.status in ("failed", "cancelled")
            and dash.may_call("requeue_run"),
        )

    @staticmethod
    def cause_chain(dash: Dashboard, run: Run) -> tuple[list[Run], bool]:
        """The runs that caused ``run``, nearest first, up to the one a human
        or the system started (or the first one no longer stored), at most
        :data:`CAUSE_CHAIN_SHOWN` of them; and whether the chain goes on."""
        chain: list[Run] = []
        seen = {run.id}
        cause_id = run.cause_run_id
        while cause_id is not None and cause_id not in seen:
            if len(chain) == CAUSE_CHAIN_SHOWN:
                return chain, True
            cause = dash.office.get_run(cause_id)
            if cause is None:
                break
            chain.append(cause)
            seen.add(cause.id)
            cause_id = cause.cause_run_id
        return chain, False

    def agents(self, request: Request, dash: Dashboard) -> Response:
        after = request.query_params.get("after") or None
        agents = dash.agents(after)
        actions = self.allow_actions and dash.may_call("pause_agent")
        return self.render(request, "agents.html", agents=agents, may_act=actions, after=after)

    def table(
        self,
        request: Request,
        title: str,
        rows: Sequence[BaseModel],
        *,
        links: Mapping[str, str] | None = None,
        next_key: str | None = None,
        extra: str = "",
    ) -> Response:
        """A list page: one table of ``rows``; ``links`` makes a column a link
        (column -> URL prefix); a full page links on from ``next_key``."""
        fields = type(rows[0]).model_fields if rows else {}
        kinds = {name: display.column_kind(name, f.annotation) for name, f in fields.items()}
        more = len(rows) >= PAGE_SIZE
        return self.render(
            request,
            "table.html",
            title=title,
            columns=list(fields),
            kinds=kinds,
            rows=[dict(row) for row in rows],
            links=links or {},
            next_query={"after": next_key} if more and next_key else None,
            extra=extra,
        )

    def wakeups(self, request: Request, dash: Dashboard) -> Response:
        rows = dash.wakeups(request.query_params.get("after") or None)
        return self.table(
            request,
            "Wakeup requests",
            rows,
            links={"run_id": "/runs/"},
            next_key=rows[-1].id if rows else None,
        )

    def events(self, request: Request, dash: Dashboard) -> Response:
        after = request.query_params.get("after", "")
        # An id past bigint is no id: the first page.
        rows = dash.events(int(after) if after.isdigit() and len(after) < 19 else None)
        poison = dash.poison()
        return self.table(
            request,
            "Events (the outbox)",
            rows,
            links={"task_id": "/tasks/"},
            next_key=str(rows[-1].id) if rows else None,
            extra=self.env.get_template("poison.html").render(poison=poison),
        )

    def routines(self, request: Request, dash: Dashboard) -> Response:
        rows = dash.routines(request.query_params.get("after") or None)
        return self.table(
            request,
            "Routines",
            rows,
            links={"id": "/routines/"},
            next_key=rows[-1].id if rows else None,
        )

    def routine(self, request: Request, dash: Dashboard) -> Response:
        routine_id = entity_id(request, "routine_id")
        if not routine_id:
            return RedirectResponse("/routines")
        routine, triggers, runs = dash.routine(routine_id)
        if routine is None:
            return self.render(request, "missing.html", status=404, what="routine", id=routine_id)
        return self.render(
            request,
            "routine.html",
            routine=routine,
            triggers=triggers,
            poisoned=dash.trigger_poison([t.id for t in triggers]),
            runs=runs,
            may_fire=self.allow_actions and dash.may_call("fire_routine"),
        )

    def tasks(self, request: Request, dash: Dashboard) -> Response:
        rows = dash.tasks(request.query_params.get("after") or None)
        return self.table(
            request,
            "Tasks",
            rows,
            links={"id": "/tasks/", "parent_id": "/tasks/"},
            next_key=rows[-1].id if rows else None,
        )

    def task(self, request: Request, dash: Dashboard) -> Response:
        task_id = entity_id(request, "task_id")
        if not task_id:
            return RedirectResponse("/tasks")
        view = dash.task(task_id)
        if view is None:
            return self.render(request, "missing.html", status=404, what="task", id=task_id)
        return self.render(request, "task.html", view=view)

    # --- actions -----------------------------------------------------------

    def _refusal(self, request: Request, dash: Dashboard, action: str) -> Response | None:
        if not self.allow_actions:
            return self.render(
                request,
                "refused.html",
                status=403,
                why="actions are off (start with --allow-actions)",
            )
        if action not in ACTION_FUNCTIONS:
            return self.render(request, "missing.html", status=404, what="action", id=action)
        if not dash.may_call(action):
            return self.render(
                request,
                "refused.html",
                status=403,
                why=f"this role may not call {ACTION_FUNCTIONS[action]}",
            )
        return None

    def confirm(self, request: Request, dash: Dashboard) -> Response:
        action = request.path_params["action"]
        refusal = self._refusal(request, dash, action)
        if refusal is not None:
            return refusal
        target = request.query_params.get("target", "")
        return self.render(request, "confirm.html", action=action, target=target, csrf=self.csrf)

    def perform(self, request: Request, dash: Dashboard, form: dict[str, str]) -> Response:
        action = request.path_params["action"]
        refusal = self._refusal(request, dash, action)
        if refusal is not None:
            return refusal
        if not hmac.compare_digest(form.get("csrf", "").encode(), self.csrf.encode()):
            return self.render(
                request, "refused.html", status=403, why="missing or wrong CSRF token"
            )
        target = form.get("target", "")
        office = dash.office
        try:
            if action == "requeue_run":
                outcome = "true" if office.requeue_run(target) else "false"
            elif action == "cancel_run":
                reason = form.get("reason") or "cancelled from officectl ui"
                outcome = "true" if office.cancel_run(target, reason) else "false"
            elif action in ("pause_agent", "resume_agent"):
                status = AgentStatus.PAUSED if action == "pause_agent" else AgentStatus.IDLE
                outcome = office.set_agent_status(target, status).status
            elif action == "fire_routine":
                outcome = office.dispatch_routine(target, RoutineSource.MANUAL).status
            else:
                results = office.sweep_stuck_parents()
                outcome = (
                    ", ".join(f"{r.parent_task_id}: {r.outcome}" for r in results)
                    or "nothing stuck"
                )
        except (OfficeError, psycopg.errors.DataError, psycopg.errors.RaiseException) as exc:
            return self.render(
                request,
                "outcome.html",
                status=400,
                action=action,
                target=target,
                outcome="error",
                detail=describe(exc),
            )
        return self.render(
            request, "outcome.html", action=action, target=target, outcome=str(outcome), detail=""
        )


def create_app(
    dsn: str,
    *,
    allow_actions: bool = False,
    timeout: float = CONNECT_TIMEOUT,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """The dashboard on the database at ``dsn``; actions only with
    ``allow_actions``. ``host`` is the address it is bound to; it answers a
    request whose Host header names that address (or the loopback names, for a
    loopback or unspecified address) or one of ``allowed_hosts``."""
    ui = UI(dsn, allow_actions=allow_actions, timeout=timeout)
    confirm = ui.page(ui.confirm)

    async def action(request: Request) -> Response:
        if request.method == "GET":
            response: Response = await run_in_threadpool(confirm, request)
            return response
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        perform = ui.page(lambda req, dash: ui.perform(req, dash, form))
        response = await run_in_threadpool(perform, request)
        return response

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        ui.database.close()

    app = Starlette(
        routes=[
            Route("/", ui.page(ui.overview)),
            Route("/runs", ui.page(ui.runs)),
            # :path: an id may hold a "/" (sent as %2F, which the server
            # decodes before routing).
            Route("/runs/{run_id:path}", ui.page(ui.run)),
            Route("/agents", ui.page(ui.agents)),
            Route("/tasks", ui.page(ui.tasks)),
            Route("/tasks/{task_id:path}", ui.page(ui.task)),
            Route("/routines", ui.page(ui.routines)),
            Route("/routines/{routine_id:path}", ui.page(ui.routine)),
            Route("/wakeups", ui.page(ui.wakeups)),
            Route("/events", ui.page(ui.events)),
            Route("/actions/{action}", action, methods=["GET", "POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        lifespan=lifespan,
    )
    app.state.ui = ui

    def refuse(request: Request, status: int, why: str) -> Response:
        return ui.render(request, "refused.html", status=status, why=why)

    app.add_middleware(Guard, hosts=served_hosts(host, allowed_hosts), refuse=refuse)
    return app
