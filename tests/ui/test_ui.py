"""``officectl ui`` over HTTP (Starlette's TestClient) against a real database:
every page answers 200 with the database's numbers, filters and keyset
pagination, actions that change the database and show the function's
outcome word, CSRF, actions off or refused to a role that may not call them,
hostile values escaped, a database that is down shown as a banner."""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from starlette.testclient import TestClient

from controlplane.migrate import migrate
from controlplane.ui import chart, create_app, database
from controlplane.ui.database import STATEMENT_TIMEOUT
from controlplane.ui.queries import PAGE_SIZE
from tests import harness
from tests.scenarios.ui import ORIGIN, browse, csrf_of, stat

HOSTILE = "<script>alert('x')</script>\"'&"


@pytest.fixture
def office(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Demo-like data: two agents, keyed runs deduped and coalesced, keyless
    runs with a cause, one claimed run, one finished."""
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'Ada')")
    db.execute("SELECT office.upsert_agent('a2', 'w1', 'Bob')")
    for i in range(3):
        db.execute("SELECT office.enqueue_run('a1', %s, '{}', %s)", (f"issue-{i}", f"issue:{i}"))
    db.execute("SELECT office.enqueue_run('a1', 'issue-0', '{}', 'issue:0')")  # deduped
    db.execute("SELECT office.enqueue_run('a1', 'issue-0', '{}', 'later:0')")  # coalesced
    db.execute(
        "SELECT office.enqueue_run('a2', 'tick', '{}', NULL, NULL, false, 'by_design', 'cron')"
    )
    db.execute("SELECT office.enqueue_run('a2', 'mail', '{}', 'mail:1')")
    db.execute("SELECT office.claim_run('w', 'a2')")
    return db


def test_overview_shows_the_databases_numbers(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    for status, runs in office.execute("SELECT status, runs FROM office.queue_stats"):
        assert stat(page.text, f"runs-{status}") == runs
    daemon = office.execute(
        "SELECT pending_events, claimed_runs, poison_rows FROM office.daemon_stats()"
    ).fetchone()
    assert daemon is not None
    assert stat(page.text, "pending_events") == daemon[0]
    assert stat(page.text, "claimed_runs") == daemon[1] == 1
    assert stat(page.text, "poison_rows") == daemon[2]
    for reason, kind, total in office.execute("SELECT reason, kind, total FROM office.dedup_stats"):
        assert f'<td>{reason}</td><td>{kind}</td>\n<td class="num">{total}</td>' in page.text
    assert "by_design" in page.text  # keyless_stats
    assert "<svg" in page.text and "queued (" in page.text
    assert "actions" not in page.text.split("<main")[1]  # read-only: no action links


def test_runs_list_filters(client: TestClient, office: psycopg.Connection[Any]) -> None:
    page = client.get("/runs")
    assert page.status_code == 200
    total = office.execute("SELECT count(*) FROM office.runs").fetchone()
    assert total is not None and page.text.count('<tr class="run">') == total[0]
    only_a2 = client.get("/runs", params={"agent": "a2"}).text
    assert only_a2.count('<tr class="run">') == 2 and "<td>a1</td>" not in only_a2
    claimed = client.get("/runs", params={"status": "claimed"}).text
    assert claimed.count('<tr class="run">') == 1
    keyed = client.get("/runs", params={"key_prefix": "issue:"}).text
    assert keyed.count('<tr class="run">') == 3
    # A LIKE wildcard in the prefix is a literal character.
    assert "no runs match" in client.get("/runs", params={"key_prefix": "issue%"}).text


def test_runs_list_pages_by_keyset(client: TestClient, office: psycopg.Connection[Any]) -> None:
    for i in range(PAGE_SIZE + 5):
        office.execute("SELECT office.enqueue_run('a1', %s)", (f"bulk-{i}",))
    first = client.get("/runs", params={"agent": "a1"}).text
    assert first.count('<tr class="run">') == PAGE_SIZE
    link = re.search(r'rel="next" href="([^"]+)"', first)
    assert link
    second = client.get(link.group(1).replace("&amp;", "&")).text
    ids = re.compile(r'<a href="/runs/([^"]+)">')
    seen = ids.findall(first) + ids.findall(second)
    a1_runs = office.execute(
        "SELECT id FROM office.runs WHERE agent_profile_id = 'a1' ORDER BY id DESC"
    ).fetchall()
    assert seen == [row[0] for row in a1_runs]
    assert 'rel="next"' not in second


def test_run_page_says_why_the_run_exists(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    row = office.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:0'").fetchone()
    assert row is not None
    page = client.get(f"/runs/{row[0]}")
    assert page.status_code == 200
    own = '<td class="wide">issue:0</td><td><span class="badge plain">own</span></td>'
    assert own in page.text
    coalesced = '<td class="wide">later:0</td><td><span class="badge off">coalesced</span></td>'
    assert coalesced in page.text
    claimed = office.execute("SELECT id FROM office.runs WHERE status = 'claimed'").fetchone()
    assert claimed is not None
    text = client.get(f"/runs/{claimed[0]}").text
    assert re.search(r'data-field="heartbeat"><time [^>]+>\d+ s ago', text)
    assert client.get("/runs/no-such-run").status_code == 404


def test_hostile_values_render_escaped(client: TestClient, office: psycopg.Connection[Any]) -> None:
    office.execute("SELECT office.upsert_agent('evil', 'w1', %s)", (HOSTILE,))
    (run_id,) = office.execute(
        "SELECT (office.enqueue_run('evil', %s, jsonb_build_object('x', %s::text, 'w', %s::text)))"
        ".run_id",
        (HOSTILE, HOSTILE, "w" * 65536),
    ).fetchone() or (None,)
    for path in (f"/runs/{run_id}", "/runs", "/agents"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "<script>" not in page.text, path
        assert "&lt;script&gt;" in page.text, path


def test_agents_page(client: TestClient, office: psycopg.Connection[Any]) -> None:
    page = client.get("/agents")
    assert page.status_code == 200
    assert page.text.count('<tr class="agent">') == 2
    assert "pause…" not in page.text
    # Queue depth per agent, and a2's claim with its worker and heartbeat.
    queued = re.findall(r'<td class="num queued">([^<]*)</td>', page.text)
    depth = office.execute(
        "SELECT a.id, count(r.id) FROM office.agent_profiles a LEFT JOIN office.runs r"
        " ON r.agent_profile_id = a.id AND r.status = 'queued' GROUP BY a.id ORDER BY a.id"
    ).fetchall()
    assert queued == [str(n) for _, n in depth]
    claimed = office.execute(
        "SELECT id, claimed_by FROM office.runs WHERE status = 'claimed'"
    ).fetchone()
    assert claimed is not None
    assert f'<a href="/runs/{claimed[0]}">' in page.text and f"<td>{claimed[1]}</td>" in page.text
    assert re.search(r'<td class="heartbeat"><time [^>]+>[^<]+ ago</time></td>', page.text)


def test_a_rare_filter_searches_window_by_window(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    office.execute(
        "INSERT INTO office.runs (id, agent_profile_id, reason, status)"
        " SELECT office._uuid_v7(), 'a1', 'bulk', 'finished' FROM generate_series(1, 10050)"
    )
    first = client.get("/runs", params={"reason": "issue-2"}).text
    # issue-2 is older than the newest 10,000 runs: the first page searched
    # them, found nothing, and offers the next window.
    assert "no runs match" in first and "search older runs" in first
    link = re.search(r'<a rel="next" href="/runs\?([^"]+)">', first)
    assert link
    older = client.get("/runs?" + link.group(1).replace("&amp;", "&")).text
    assert older.count('<tr class="run">') == 1 and "<td>issue-2</td>" in older
    assert 'rel="next"' not in older


def test_cancel_run_with_confirmation(actions: TestClient, office: psycopg.Connection[Any]) -> None:
    row = office.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:1'").fetchone()
    assert row is not None
    run_page = actions.get(f"/runs/{row[0]}").text
    assert "/actions/cancel_run?target=" in run_page
    confirm = actions.get("/actions/cancel_run", params={"target": row[0]})
    assert confirm.status_code == 200 and "Yes, cancel run" in confirm.text
    done = actions.post(
        "/actions/cancel_run",
        data={"csrf": csrf_of(confirm.text), "target": row[0], "reason": "operator"},
    )
    assert done.status_code == 200
    assert '<strong id="outcome">true</strong>' in done.text
    status = office.execute(
        "SELECT status, cancel_reason FROM office.runs WHERE id = %s", (row[0],)
    ).fetchone()
    assert status == ("cancelled", "operator")


def test_pause_and_resume_an_agent(actions: TestClient, office: psycopg.Connection[Any]) -> None:
    token = csrf_of(actions.get("/actions/pause_agent", params={"target": "a1"}).text)
    paused = actions.post("/actions/pause_agent", data={"csrf": token, "target": "a1"})
    assert '<strong id="outcome">paused</strong>' in paused.text
    agent = office.execute("SELECT status FROM office.agent_profiles WHERE id = 'a1'").fetchone()
    assert agent == ("paused",)
    assert "resume…" in actions.get("/agents").text
    resumed = actions.post("/actions/resume_agent", data={"csrf": token, "target": "a1"})
    assert '<strong id="outcome">idle</strong>' in resumed.text


def test_sweep_once(actions: TestClient) -> None:
    token = csrf_of(actions.get("/actions/sweep").text)
    done = actions.post("/actions/sweep", data={"csrf": token})
    assert '<strong id="outcome">nothing stuck</strong>' in done.text


def test_post_without_csrf_is_refused(actions: TestClient, office: psycopg.Connection[Any]) -> None:
    row = office.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:2'").fetchone()
    assert row is not None
    for data in ({"target": row[0]}, {"target": row[0], "csrf": "forged"}, {"csrf": "é"}):
        refused = actions.post("/actions/cancel_run", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert office.execute("SELECT status FROM office.runs WHERE id = %s", (row[0],)).fetchone() == (
        "queued",
    )


def queued_run(office: psycopg.Connection[Any]) -> str:
    row = office.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:2'").fetchone()
    assert row is not None
    return str(row[0])


def status_of(office: psycopg.Connection[Any], run_id: str) -> str:
    row = office.execute("SELECT status FROM office.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_host_the_dashboard_does_not_serve_is_refused(
    actions: TestClient, office: psycopg.Connection[Any]
) -> None:
    """DNS rebinding: a name the attacker points at the dashboard's address
    reaches it with its own Host header; that page must not answer (it would
    give the CSRF token to the attacker's script), nor its POST."""
    run_id = queued_run(office)
    token = csrf_of(actions.get("/actions/cancel_run", params={"target": run_id}).text)
    evil = {"Host": "rebind.evil.example:8765", "Origin": "http://rebind.evil.example:8765"}
    for path in ("/", "/runs", f"/runs/{run_id}", "/static/office.css"):
        page = actions.get(path, headers=evil)
        assert page.status_code == 400, path
        assert "does not serve the host" in page.text and "csrf" not in page.text, path
    confirm = actions.get("/actions/cancel_run", params={"target": run_id}, headers=evil)
    assert confirm.status_code == 400 and token not in confirm.text
    posted = actions.post(
        "/actions/cancel_run", data={"csrf": token, "target": run_id}, headers=evil
    )
    assert posted.status_code == 400 and status_of(office, run_id) == "queued"
    # The unspecified address names no host; a Host with a junk port is no host.
    for host in ("0.0.0.0:8765", "127.0.0.1:x", "", "127.0.0.1.evil.example"):
        assert actions.get("/", headers={"Host": host}).status_code == 400, host
    # A loopback bind answers the loopback names, with or without a port.
    for host in ("127.0.0.1", "localhost:8765", "LOCALHOST.", "[::1]:8765"):
        assert actions.get("/", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_and_the_bound_address(dsn: str, office: psycopg.Connection[Any]) -> None:
    with browse(create_app(dsn, allowed_hosts=["Dash.Example"])) as http:
        assert http.get("/", headers={"Host": "dash.example:8765"}).status_code == 200
        assert http.get("/", headers={"Host": "other.example"}).status_code == 400
    # Bound to a LAN address: that address, not the loopback names.
    with browse(create_app(dsn, host="192.0.2.7")) as http:
        assert http.get("/", headers={"Host": "192.0.2.7:8765"}).status_code == 200
        assert http.get("/", headers={"Host": "localhost:8765"}).status_code == 400
    # Bound to every address: the loopback names and --allowed-host only.
    with browse(create_app(dsn, host="0.0.0.0", allowed_hosts=["192.0.2.7"])) as http:
        assert http.get("/", headers={"Host": "localhost:8765"}).status_code == 200
        assert http.get("/", headers={"Host": "192.0.2.7"}).status_code == 200
        assert http.get("/", headers={"Host": "0.0.0.0:8765"}).status_code == 400


def test_a_post_not_from_the_dashboards_own_pages_is_refused(
    actions: TestClient, office: psycopg.Connection[Any]
) -> None:
    """A POST with the right token but another site's Origin (or Referer,
    when it sends no Origin), or with neither, changes nothing (403)."""
    run_id = queued_run(office)
    token = csrf_of(actions.get("/actions/cancel_run", params={"target": run_id}).text)
    form = {"csrf": token, "target": run_id}
    for origin in (
        "http://rebind.evil.example:8765",
        "null",
        "http://127.0.0.1:9999",
        "https://127.0.0.1:8765",
    ):
        refused = actions.post("/actions/cancel_run", data=form, headers={"Origin": origin})
        assert refused.status_code == 403 and "another site" in refused.text, origin
    del actions.headers["Origin"]
    refused = actions.post(
        "/actions/cancel_run", data=form, headers={"Referer": "http://evil.example/x"}
    )
    assert refused.status_code == 403 and "another site" in refused.text
    refused = actions.post("/actions/cancel_run", data=form)
    assert refused.status_code == 403 and "own Origin or Referer" in refused.text
    assert status_of(office, run_id) == "queued"
    # The dashboard's own Referer, when a browser sends no Origin, is enough.
    done = actions.post(
        "/actions/cancel_run", data=form, headers={"Referer": f"{ORIGIN}/actions/cancel_run"}
    )
    assert done.status_code == 200 and status_of(office, run_id) == "cancelled"


def test_every_response_forbids_framing_and_foreign_content(
    actions: TestClient, office: psycopg.Connection[Any]
) -> None:
    responses = [
        actions.get("/"),
        actions.get("/actions/sweep"),
        actions.get("/static/office.css"),
        actions.get("/runs/no-such-run"),
        actions.get("/no/such/page"),
        actions.get("/", headers={"Host": "rebind.evil.example"}),
        actions.post("/actions/sweep", headers={"Origin": "http://evil.example"}),
    ]
    with browse(create_app("postgresql://nobody@127.0.0.1:1/none", timeout=1)) as down:
        responses.append(down.get("/"))
    assert [r.status_code for r in responses] == [200, 200, 200, 404, 404, 400, 403, 503]
    for response in responses:
        assert response.headers["X-Frame-Options"] == "DENY", response.url
        csp = response.headers["Content-Security-Policy"]
        for directive in ("frame-ancestors 'none'", "default-src 'self'", "script-src 'self'"):
            assert directive in csp, response.url
        assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_actions_off_are_absent_and_refused(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    row = office.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:2'").fetchone()
    assert row is not None
    assert "/actions/" not in client.get(f"/runs/{row[0]}").text
    assert client.get("/actions/cancel_run", params={"target": row[0]}).status_code == 403
    refused = client.post("/actions/cancel_run", data={"target": row[0], "csrf": "x"})
    assert refused.status_code == 403 and "actions are off" in refused.text
    assert office.execute("SELECT status FROM office.runs WHERE id = %s", (row[0],)).fetchone() == (
        "queued",
    )


def test_office_reader_sees_every_page_and_may_not_act(
    dsn: str, office: psycopg.Connection[Any]
) -> None:
    reader = dsn + "?options=-crole%3Doffice_reader"
    row = office.execute("SELECT id FROM office.runs ORDER BY id DESC LIMIT 1").fetchone()
    assert row is not None
    with browse(create_app(reader, allow_actions=True)) as http:
        overview = http.get("/")
        assert overview.status_code == 200 and "as office_reader" in overview.text
        # The pages read through the dashboard's functions (granted to
        # office_reader), never the tables (granted to nobody).
        for path in ("/runs", "/agents", "/tasks", "/routines", "/wakeups", "/events"):
            page = http.get(path)
            assert page.status_code == 200, (path, page.text)
            assert "/actions/" not in page.text
        assert row[0] in http.get("/runs").text
        page = http.get(f"/runs/{row[0]}")  # get_run is granted to office_reader
        assert page.status_code == 200 and "/actions/cancel_run" not in page.text
        refused = http.post("/actions/cancel_run", data={"target": row[0], "csrf": "x"})
        assert refused.status_code == 403 and "may not call office.cancel_run" in refused.text


def test_a_role_without_office_grants_is_told_what_it_may_not_see(
    dsn: str, office: psycopg.Connection[Any]
) -> None:
    name = f"ui_stranger_{secrets.token_hex(6)}"
    office.execute(f"CREATE ROLE {name}")
    try:
        with browse(create_app(dsn + f"?options=-crole%3D{name}")) as http:
            runs = http.get("/runs")
            assert runs.status_code == 403 and "Not visible to this role" in runs.text
            assert "Traceback" not in runs.text
    finally:
        office.execute(f"DROP ROLE {name}")


def test_a_page_past_its_statement_timeout_says_so_and_the_next_one_works(
    dsn: str, office: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "STATEMENT_TIMEOUT", "300ms")
    with browse(create_app(dsn)) as http, psycopg.connect(dsn) as locker:
        assert http.get("/runs").status_code == 200
        locker.execute("LOCK TABLE office.runs IN ACCESS EXCLUSIVE MODE")
        page = http.get("/runs")  # waits on the lock until statement_timeout
        assert page.status_code == 400 and "57014" in page.text
        assert "not reachable" not in page.text and "Traceback" not in page.text
        locker.rollback()
        assert http.get("/runs").status_code == 200


def test_the_overview_estimates_the_history_of_a_large_table(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    office.execute(
        "INSERT INTO office.runs (id, agent_profile_id, reason, status, finished_at)"
        " SELECT office._uuid_v7(), 'a1', 'bulk', 'finished', now()"
        " FROM generate_series(1, 20000)"
    )
    office.execute("ANALYZE office.runs")
    page = client.get("/").text
    exact = office.execute("SELECT status, runs FROM office.queue_stats").fetchall()
    for status, runs in exact:
        shown = re.search(rf'data-stat="runs-{status}">(≈ )?([0-9]+)', page)
        assert shown, status
        if status in ("queued", "claimed"):
            assert shown.group(1) is None and int(shown.group(2)) == runs
        else:  # the history: ANALYZE's estimate, marked
            assert shown.group(1) == "≈ "
    finished = re.search(r'data-stat="runs-finished">≈ ([0-9]+)', page)
    assert finished and abs(int(finished.group(1)) - 20_001) < 2_000
    assert "the estimate of the last ANALYZE" in page


@pytest.mark.skipif(
    not (harness.pg_bindir() / "pg_ctl").exists(), reason="no pg_ctl for a second cluster"
)
def test_the_database_stopped_under_the_ui_is_a_banner_until_it_is_back() -> None:
    with harness.throwaway_cluster() as cluster:
        url = f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
        migrate(url)  # the plain-SQL install: no extension files needed there
        with browse(create_app(url, timeout=2)) as http:
            assert http.get("/runs").status_code == 200
            cluster.stop()
            for path in ("/", "/runs"):
                down = http.get(path)
                assert down.status_code == 503 and "The database is not reachable" in down.text
            cluster.start()
            assert http.get("/").status_code == 200
            assert http.get("/runs").status_code == 200


def test_database_down_is_a_banner() -> None:
    with browse(create_app("postgresql://nobody:s3cret@127.0.0.1:1/none", timeout=1)) as http:
        for path in ("/", "/runs", "/agents"):
            page = http.get(path)
            assert page.status_code == 503
            assert "The database is not reachable" in page.text
            assert "Traceback" not in page.text and "s3cret" not in page.text


@pytest.mark.skipif(
    not (harness.pg_bindir() / "pg_ctl").exists(), reason="no pg_ctl for a second cluster"
)
def test_officectl_ui_started_while_the_database_is_down_serves_the_banner() -> None:
    """``officectl ui`` on a server that is not running: it serves the banner
    (and says why on stderr), then the pages once the server is up."""
    with harness.throwaway_cluster() as cluster:
        url = cluster.url()
        migrate(url)
        cluster.stop()
        with served(url) as (base, line):
            assert "officectl ui on" in line
            # Each banner waits the pool's timeout (3 s): one page is enough.
            page = httpx.get(base + "runs", timeout=30)
            assert page.status_code == 503 and "The database is not reachable" in page.text
            cluster.start()
            assert httpx.get(base, timeout=30).status_code == 200
            runs = httpx.get(base + "runs", timeout=30)
            assert runs.status_code == 200 and "no runs match" in runs.text


def test_recovers_when_the_server_drops_its_connections(
    client: TestClient, office: psycopg.Connection[Any], dsn: str
) -> None:
    assert client.get("/").status_code == 200
    office.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    assert client.get("/").status_code == 200


@contextmanager
def served(dsn: str, *args: str) -> Iterator[tuple[str, str]]:
    """``officectl ui`` as a process on a free port: yields its URL and the
    line it printed, once it answers."""
    port = harness.free_port()
    env = {k: v for k, v in os.environ.items() if k != "OFFICE_DSN"} | {"PYTHONUNBUFFERED": "1"}
    officectl = str(Path(sys.executable).with_name("officectl"))
    proc = subprocess.Popen(
        [officectl, "--dsn", dsn, "ui", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        # The URL is printed before uvicorn binds: wait for the socket to accept.
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=10)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
                time.sleep(0.1)
        yield url, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_officectl_ui_serves_and_prints_its_url(dsn: str, office: psycopg.Connection[Any]) -> None:
    with served(dsn, "--allowed-host", "dash.example") as (url, line):
        assert url in line and "read-only" in line
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and 'data-stat="runs-queued"' in page.text
        named = httpx.get(url, headers={"Host": "dash.example"}, timeout=10)
        assert named.status_code == 200 and 'data-stat="runs-queued"' in named.text
        assert httpx.get(url, headers={"Host": "evil.example"}, timeout=10).status_code == 400


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_overview_screenshot_in_chromium(
    dsn: str, family: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Headless Chromium draws the overview (the README's picture: set
    OFFICE_UI_SCREENSHOT to a path to keep it)."""
    assert CHROMIUM is not None
    with served(dsn) as (url, _):
        httpx.get(url, timeout=10)  # the chart's first sample
        for i in range(12):
            family.execute("SELECT office.enqueue_run('a2', %s, '{}', %s)", (f"r{i % 4}", f"k{i}"))
        time.sleep(chart.MIN_SPACING.total_seconds() + 0.5)  # a second sample, not merged
        shot = tmp_path / "overview.png"
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1280,1500",
                f"--screenshot={shot}",
                url,
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    keep = os.environ.get("OFFICE_UI_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_fire_a_routine(actions: TestClient, office: psycopg.Connection[Any]) -> None:
    office.execute("SELECT office.create_routine('w1', 'daily', '{}', 'a1', id => 'rt1')")
    confirm = actions.get("/actions/fire_routine", params={"target": "rt1"})
    assert confirm.status_code == 200
    done = actions.post(
        "/actions/fire_routine", data={"csrf": csrf_of(confirm.text), "target": "rt1"}
    )
    row = office.execute(
        "SELECT status, source FROM office.routine_runs WHERE routine_id = 'rt1'"
    ).fetchone()
    assert row is not None and row[1] == "manual"
    assert f'<strong id="outcome">{row[0]}</strong>' in done.text
    unknown = actions.post(
        "/actions/fire_routine", data={"csrf": csrf_of(confirm.text), "target": "nope"}
    )
    assert unknown.status_code == 400 and '<strong id="outcome">error</strong>' in unknown.text


@pytest.fixture
def family(office: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A parent whose only child completed before the parent was assigned:
    no edge delivered its wake, so it is stuck until a sweep."""
    office.execute("SELECT office.create_task('w1', 'epic', %s)", (HOSTILE,))
    office.execute("SELECT office.create_task('w1', 'story', 'child', parent_id => 'epic')")
    office.execute("SELECT office.create_task('w1', 'blocker', 'b')")
    office.execute("SELECT office.add_blocker('story', 'blocker')")
    office.execute("SELECT office.move_task('story', 'COMPLETED')")
    office.execute("SELECT office.assign_task('epic', 'a1')")
    return office


def test_task_page_shows_the_family_and_the_sweep_unsticks_it(
    actions: TestClient, family: psycopg.Connection[Any]
) -> None:
    tasks = actions.get("/tasks")
    assert tasks.status_code == 200 and tasks.text.count('<tr class="row">') == 3
    epic = actions.get("/tasks/epic").text
    assert 'data-field="stuck">yes' in epic
    assert '<td><span class="badge ok">COMPLETED</span></td>' in epic
    assert "&lt;script&gt;" in epic and "<script>" not in epic
    story = actions.get("/tasks/story").text
    assert '<a href="/tasks/blocker">blocker</a>' in story and '<a href="/tasks/epic">' in story
    token = csrf_of(actions.get("/actions/sweep").text)
    swept = actions.post("/actions/sweep", data={"csrf": token})
    assert '<strong id="outcome">epic: queued</strong>' in swept.text
    after = actions.get("/tasks/epic").text
    assert 'data-field="stuck">no' in after and "generation delivered" in after
    assert actions.get("/tasks/nope").status_code == 404


#: Valid ids (no ',', ':' or control character) that a URL must encode. (One
#: with a "%" is in the browser's test: Starlette's TestClient decodes a path
#: twice, uvicorn once.)
PATH_IDS = ("a/b", "../actions/sweep", "..", "sp ace?#&")


def test_ids_with_a_slash_have_their_pages(
    actions: TestClient, office: psycopg.Connection[Any]
) -> None:
    """Every link to an id leads to that id's page: a "/" is encoded, so
    ``../actions/sweep`` is a task, not the sweep's confirmation."""
    office.execute("SELECT office.create_task('w1', 'root', 'the root')")
    for i, task_id in enumerate(PATH_IDS):
        office.execute(
            "SELECT office.create_task('w1', %s, %s, parent_id => 'root')",
            (task_id, f"title-{i}"),
        )
        office.execute(
            "SELECT office.create_routine('w1', %s, '{}', 'a1', id => %s)",
            (f"routine-{i}", task_id),
        )
    links = re.compile(r'<a href="([^"]+)">([^<]+)</a>')
    for listing, kind, shown in (
        ("/tasks", "/tasks/", "title-"),
        ("/tasks/root", "/tasks/", "title-"),
        ("/routines", "/routines/", "routine-"),
    ):
        found = {
            html.unescape(text): html.unescape(href)
            for href, text in links.findall(actions.get(listing).text)
            if href.startswith(kind)
        }
        for i, entity_id in enumerate(PATH_IDS):
            href = found[entity_id]
            page = actions.get(href)
            assert page.status_code == 200, (listing, entity_id, href)
            assert f"{shown}{i}" in page.text, (listing, entity_id, href)
    assert found["a/b"] == "/routines/a%2Fb"
    assert found["../actions/sweep"] == "/routines/..%2Factions%2Fsweep"
    assert found[".."] == "/routines/?id=.."
    # An action's link carries the id as a query value: its confirmation
    # names that routine.
    routine = actions.get("/routines/..%2Factions%2Fsweep").text
    fire = re.search(r'href="(/actions/fire_routine\?[^"]+)"', routine)
    assert fire
    confirm = actions.get(html.unescape(fire.group(1))).text
    assert '<input type="hidden" name="target" value="../actions/sweep">' in confirm
    # A detail path with no id is its list.
    listed = actions.get("/tasks/", follow_redirects=False)
    assert listed.status_code in (302, 303, 307) and listed.headers["location"] == "/tasks"


def test_event_payloads_are_json(actions: TestClient, family: psycopg.Connection[Any]) -> None:
    family.execute(
        "UPDATE office.events SET payload = %s::jsonb",
        (json.dumps({"b": [True, None, 1.5], "a": "it's <x>"}),),
    )
    page = actions.get("/events").text
    shown = [html.unescape(p) for p in re.findall(r'<pre class="json">(.*?)</pre>', page, re.S)]
    assert shown and len(shown) == page.count('<tr class="row">')
    expected = json.dumps({"a": "it's <x>", "b": [True, None, 1.5]}, sort_keys=True, indent=2)
    assert set(shown) == {expected}
    assert "True" not in page and "None" not in page and "&lt;x&gt;" in page


def test_routines_wakeups_and_events_pages(
    actions: TestClient, family: psycopg.Connection[Any]
) -> None:
    family.execute("SELECT office.create_routine('w1', %s, '{}', 'a2', id => 'light')", (HOSTILE,))
    listing = actions.get("/routines")
    assert listing.status_code == 200 and '<a href="/routines/light">light</a>' in listing.text
    assert "<script>" not in listing.text
    token = csrf_of(actions.get("/actions/fire_routine", params={"target": "light"}).text)
    actions.post("/actions/fire_routine", data={"csrf": token, "target": "light"})
    routine = actions.get("/routines/light").text
    fired = family.execute("SELECT count(*) FROM office.routine_runs").fetchone()
    assert fired is not None and routine.count('<tr class="routine-run">') == fired[0] == 1
    assert "Fire this routine now" in routine
    wakeups = actions.get("/wakeups")
    queued = family.execute("SELECT count(*) FROM office.wakeup_requests").fetchone()
    assert queued is not None and queued[0] >= 1
    assert wakeups.text.count('<tr class="row">') == queued[0]
    events = actions.get("/events")
    written = family.execute("SELECT count(*) FROM office.events").fetchone()
    assert written is not None and written[0] > 0
    assert events.text.count('<tr class="row">') == min(written[0], PAGE_SIZE)
    assert "nothing set aside" in events.text
    family.execute("SELECT office.set_aside('subscriber', '1', %s, 'XX000')", (HOSTILE,))
    poisoned = actions.get("/events").text
    assert "&lt;script&gt;" in poisoned and "<script>" not in poisoned
    assert stat(actions.get("/").text, "poison-subscriber") == 1


def test_values_the_server_refuses_are_one_line(client: TestClient) -> None:
    refused = client.get("/runs", params={"agent": "a\x00b"})
    assert refused.status_code == 400 and "NUL" in refused.text
    assert "Traceback" not in refused.text
    assert client.get("/events", params={"after": "9" * 40}).status_code == 200


def test_pages_run_under_a_statement_timeout(client: TestClient) -> None:
    """A filter that walks a huge table is cut off by the server, not left
    to load it: the pages' connections carry statement_timeout."""
    ui_database = client.app.state.ui.database  # type: ignore[attr-defined]
    with ui_database.dashboard() as dash, dash.office.pool.connection() as conn:
        row = conn.execute("SHOW statement_timeout").fetchone()
    assert row == (STATEMENT_TIMEOUT,)


CHROMEDRIVER = shutil.which("chromedriver")
#: Task ids a browser would resolve or split if the link did not encode them.
BROWSER_IDS = {"../actions/sweep": "not the sweep", "a/b%2Fc": "percent", "..": "dots"}


@pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None, reason="chromium and chromium-driver are needed"
)
def test_click_through_in_a_real_browser(
    dsn: str, family: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Headless Chromium (Debian's chromium and chromium-driver, driven by
    selenium) at 1,280 px: the overview, a run page and a task page render
    without scrolling sideways, the overview's live refresh shows a new run
    without a reload, one action goes through its confirmation, and no page
    logs a console error."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    run = family.execute("SELECT id FROM office.runs WHERE idempotency_key = 'issue:2'").fetchone()
    assert run is not None
    for task_id, title in BROWSER_IDS.items():
        family.execute(
            "SELECT office.create_task('w1', %s, %s, parent_id => 'epic')", (task_id, title)
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1500"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with served(dsn, "--allow-actions") as (url, _):
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:

            def console_errors() -> list[dict[str, Any]]:
                # selenium leaves get_log untyped.
                entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
                return [e for e in entries if e["level"] == "SEVERE"]

            def visit(path: str, shot: str) -> str:
                driver.get(url.rstrip("/") + path)
                driver.save_screenshot(str(tmp_path / f"{shot}.png"))
                assert console_errors() == [], path
                # Nothing wider than the window at 1,280 px: no page scrolls
                # sideways.
                overflow = driver.execute_script(
                    "const page = document.documentElement;"
                    " return page.scrollWidth - page.clientWidth"
                )
                assert overflow <= 0, (path, overflow)
                return str(driver.find_element(By.TAG_NAME, "main").text)

            overview = visit("/", "overview")
            assert "as postgres" in overview and "queued" in overview
            # The live refresh: a run enqueued now shows up in the queued
            # count without the page being loaded again.
            driver.execute_script("window.officeNotReloaded = true")
            cell = "[data-stat='runs-queued']"
            before = int(driver.find_element(By.CSS_SELECTOR, cell).text.lstrip("≈ "))
            family.execute("SELECT office.enqueue_run('a2', 'live', '{}', 'live:1')")
            WebDriverWait(driver, 60).until(
                lambda d: int(d.find_element(By.CSS_SELECTOR, cell).text.lstrip("≈ ")) == before + 1
            )
            assert driver.execute_script("return window.officeNotReloaded") is True
            assert console_errors() == []
            page = visit(f"/runs/{run[0]}", "run")
            assert run[0][-8:] in page and "issue:2" in page
            epic = visit("/tasks/epic", "task")
            assert HOSTILE in epic  # the hostile title is shown as text, escaped
            # A child's link leads to its page, whatever its id holds.
            for task_id, title in BROWSER_IDS.items():
                visit("/tasks/epic", "task-again")
                driver.find_element(By.LINK_TEXT, task_id).click()
                child = WebDriverWait(driver, 60).until(
                    expected_conditions.presence_of_element_located((By.TAG_NAME, "h2"))
                )
                assert child.text == f"Task {task_id}: {title}", task_id
                assert console_errors() == [], task_id
            # One action through its confirmation: cancel the run.
            visit(f"/runs/{run[0]}", "run-again")
            driver.find_element(By.CSS_SELECTOR, "a[href*='/actions/cancel_run']").click()
            assert "Confirm: cancel run" in driver.find_element(By.TAG_NAME, "main").text
            driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            # The click returns once the POST is sent, not once its page has
            # loaded: wait for the outcome page before reading it.
            outcome = WebDriverWait(driver, 60).until(
                expected_conditions.presence_of_element_located((By.ID, "outcome"))
            )
            assert outcome.text == "true"
            driver.save_screenshot(str(tmp_path / "outcome.png"))
            assert console_errors() == []
        finally:
            driver.quit()
    status = family.execute("SELECT status FROM office.runs WHERE id = %s", run).fetchone()
    assert status == ("cancelled",)
    assert all((tmp_path / f"{n}.png").stat().st_size > 0 for n in ("overview", "run", "task"))


def test_a_value_the_client_cannot_decode_is_shown_as_such(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    # 0.4.0: a payload 1,200 levels deep (stored before 0.5.0 bounded the
    # depth) made /runs, /wakeups and the run's page answer 500.
    # (Inserted shallow, then given the values with the update's bound off.)
    office.execute("ALTER TABLE office.runs DISABLE TRIGGER runs_05_bounded")
    office.execute("ALTER TABLE office.wakeup_requests DISABLE TRIGGER wakeup_requests_05_bounded")
    deep = "jsonb_build_object('deep', (repeat('[', 1200) || repeat(']', 1200))::jsonb)"
    row = office.execute(
        "INSERT INTO office.runs (agent_profile_id, reason) VALUES ('a1', 'deep') RETURNING id"
    ).fetchone()
    assert row is not None
    office.execute(
        f"UPDATE office.runs SET payload = {deep}, context_snapshot = {deep} WHERE id = %s",
        [row[0]],
    )
    office.execute(
        "INSERT INTO office.wakeup_requests (agent_profile_id, source, payload)"
        f" VALUES ('a1', 'user', {deep})"
    )
    for path in (f"/runs/{row[0]}", "/runs", "/wakeups"):
        assert client.get(path).status_code == 200, path
    # The values themselves: the run's page shows its payload and snapshot
    # (the runs and wakeups lists show no payload).
    page = client.get(f"/runs/{row[0]}").text
    assert page.count("cannot display: a JSON document of") == 2
