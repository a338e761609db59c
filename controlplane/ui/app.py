"""The dashboard's Starlette application: server-rendered pages (Jinja2,
autoescaped), a stylesheet shipped in the package, no script.

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
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from controlplane.cli.base import describe
from controlplane.client import Office
from controlplane.client.queries.dashboard import DASHBOARD_STATEMENT_TIMEOUT
from controlplane.errors import OfficeError
from controlplane.models import AgentStatus, RoutineSource
from controlplane.ui import chart
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
#: Seconds a page waits for the database before it shows the banner.
CONNECT_TIMEOUT = 3.0
#: The longest statement a page may run. Lists are keyset pages on primary
#: keys, but a filter that matches almost nothing walks the key to its end;
#: past this the page says so instead of loading the database it watches.
STATEMENT_TIMEOUT = "5s"


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute(DASHBOARD_STATEMENT_TIMEOUT.text, {"timeout": STATEMENT_TIMEOUT})


class DatabaseDown(Exception):
    """The database could not be reached (or went away mid-page)."""


class Database:
    """A pool opened on first use and dropped when the server goes away, so
    the dashboard comes back by itself when the database does."""

    def __init__(self, dsn: str, timeout: float = CONNECT_TIMEOUT) -> None:
        self._dsn = dsn
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._office: Office | None = None

    def _open(self) -> Office:
        with self._lock:
            if self._office is None:
                pool: ConnectionPool[Any] = ConnectionPool(
                    self._dsn,
                    min_size=1,
                    max_size=4,
                    kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout))},
                    timeout=self._timeout,
                    # A connection the server dropped is found at checkout,
                    # not by the page that would use it.
                    check=ConnectionPool.check_connection,
                    configure=_configure,
                    open=False,
                    name="office-ui",
                )
                try:
                    pool.open(wait=True, timeout=self._timeout)
                except PoolTimeout:
                    pool.close()
                    raise DatabaseDown("the database does not answer") from None
                self._pool, self._office = pool, Office(pool=pool)
            return self._office

    def discard(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
            self._pool = self._office = None

    @contextmanager
    def dashboard(self) -> Iterator[Dashboard]:
        office = self._open()
        try:
            yield Dashboard(office)
        except psycopg.errors.QueryCanceled:
            raise  # statement_timeout: the page says so; the database is up
        except (psycopg.OperationalError, PoolTimeout) as exc:
            self.discard()
            raise DatabaseDown(describe(exc)) from None

    def close(self) -> None:
        self.discard()


def _age(value: datetime | None) -> str:
    if value is None:
        return "—"
    seconds = int((datetime.now(UTC) - value).total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


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
    env.filters["age"] = _age
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
        return self.render(
            request,
            "run.html",
            run=run,
            keys=dash.office.run_keys(run_id),
            may_cancel=self.allow_actions
            and run.status in ("queued", "claimed")
            and dash.may_call("cancel_run"),
        )

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
        columns = list(type(rows[0]).model_fields) if rows else []
        more = len(rows) >= PAGE_SIZE
        return self.render(
            request,
            "table.html",
            title=title,
            columns=columns,
            rows=[row.model_dump(mode="json") for row in rows],
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
            if action == "cancel_run":
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
