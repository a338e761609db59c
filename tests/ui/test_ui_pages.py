"""What the dashboard's pages show and offer beyond their numbers (against a
real database, through Starlette's TestClient): readable tables, the live
refresh's markers and script, a run's lineage, the requeue action, a
trigger set aside, an error column; hostile values escaped in each."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from tests.scenarios.ui import csrf_of

HOSTILE = "<script>alert('x')</script>\"'&"


@pytest.fixture
def office(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'Ada')")
    db.execute("SELECT office.upsert_agent('a2', 'w1', 'Bob')")
    db.execute("SELECT office.create_task('w1', id => 't1', title => %s)", (HOSTILE,))
    return db


def enqueue(db: psycopg.Connection[Any], agent: str, key: str, **extra: Any) -> str:
    names = "".join(f", {name} => %({name})s" for name in extra)
    row = db.execute(
        # The key is the reason too: no run here coalesces into another.
        "SELECT run_id FROM office.enqueue_run(%(agent)s, %(key)s, '{}', %(key)s" + names + ")",
        {"agent": agent, "key": key, **extra},
    ).fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


def failed_run(db: psycopg.Connection[Any], agent: str, key: str, error: str) -> str:
    run_id = enqueue(db, agent, key)
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w', %s)", (agent,)).fetchone()
    assert claimed is not None and claimed[0] == run_id
    ok = db.execute("SELECT office.fail_run(%s, %s, %s)", (run_id, claimed[1], error)).fetchone()
    assert ok == (True,)
    return run_id


def test_the_live_pages_are_marked_and_their_script_is_served(client: TestClient) -> None:
    for path in ("/", "/runs", "/agents"):
        page = client.get(path).text
        assert "<main data-live>" in page, path
        assert 'id="live-toggle"' in page and "data-live-region" in page, path
    assert "<main data-live>" not in client.get("/tasks").text  # not a live page
    script = client.get("/static/office.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "data-live-region" in script.text and "live-toggle" in script.text
    policy = client.get("/").headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


def test_lists_show_labels_badges_and_words_not_python(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    tasks = client.get("/tasks").text
    assert ">assignee<" in tasks and ">assignee_agent_profile_id<" not in tasks
    assert ">ephemeral<" in tasks
    assert ">True<" not in tasks and ">False<" not in tasks
    assert '<span class="badge' in tasks
    enqueue(office, "a1", "k1")
    runs = client.get("/runs").text
    assert '<span class="badge wait">queued</span>' in runs
    assert "<time datetime=" in runs and " UTC" in runs


def test_ids_are_shortened_with_the_whole_id_on_hover_and_to_copy(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(office, "a1", "k1")
    runs = client.get("/runs").text
    assert f'title="{run_id}"' in runs and f'data-copy="{run_id}"' in runs
    assert f">…{run_id[-8:]}</a>" in runs


def test_the_runs_list_has_an_error_column_escaped(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    failed_run(office, "a1", "k-fail", HOSTILE)
    runs = client.get("/runs", params={"status": "failed"}).text
    assert "<th>error</th>" in runs
    assert str(escape(HOSTILE)) in runs and HOSTILE not in runs


def test_a_run_page_shows_its_lineage_up_to_the_human_who_started_it(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    root = enqueue(office, "a1", "root", origin="human")
    middle = enqueue(office, "a2", "middle", cause_run_id=root)
    leaf = enqueue(office, "a1", "leaf", cause_run_id=middle)
    depths = dict(
        office.execute(
            "SELECT id, chain_depth FROM office.runs WHERE id = ANY (%s)", ([root, middle, leaf],)
        ).fetchall()
    )
    assert depths == {root: 0, middle: 1, leaf: 2}
    page = client.get(f"/runs/{leaf}").text
    assert '<td class="num" data-field="chain-depth">2</td>' in page
    assert '<span class="badge plain">agent</span>' in page
    chain = page[page.index('data-field="cause"') :]
    assert chain.index(f"/runs/{middle}") < chain.index(f"/runs/{root}")
    assert "human" in chain
    top = client.get(f"/runs/{root}").text
    assert "— (a human wake)" in top


def test_requeue_a_failed_run_keeps_one_run_for_its_key(
    actions: TestClient, office: psycopg.Connection[Any]
) -> None:
    run_id = failed_run(office, "a1", "k-requeue", "boom")
    page = actions.get(f"/runs/{run_id}").text
    assert "/actions/requeue_run?target=" in page
    assert "/actions/cancel_run?target=" not in page  # a failed run is not cancellable
    confirm = actions.get("/actions/requeue_run", params={"target": run_id})
    assert confirm.status_code == 200 and "Yes, requeue run" in confirm.text
    done = actions.post(
        "/actions/requeue_run", data={"csrf": csrf_of(confirm.text), "target": run_id}
    )
    assert '<strong id="outcome">true</strong>' in done.text
    rows = office.execute(
        "SELECT id, status FROM office.runs WHERE idempotency_key = 'k-requeue'"
    ).fetchall()
    assert rows == [(run_id, "queued")]
    again = actions.post(
        "/actions/requeue_run", data={"csrf": csrf_of(confirm.text), "target": run_id}
    )
    assert '<strong id="outcome">false</strong>' in again.text  # queued now: nothing to do
    claimed = office.execute("SELECT id, attempt FROM office.claim_run('w', 'a1')").fetchone()
    assert claimed == (run_id, 2)


def test_requeue_is_not_offered_read_only(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    run_id = failed_run(office, "a1", "k-ro", "boom")
    assert "/actions/requeue_run" not in client.get(f"/runs/{run_id}").text
    refused = client.post("/actions/requeue_run", data={"csrf": "x", "target": run_id})
    assert refused.status_code == 403
    status = office.execute("SELECT status FROM office.runs WHERE id = %s", (run_id,)).fetchone()
    assert status == ("failed",)


def test_a_trigger_set_aside_is_marked_on_its_routine(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    office.execute("SELECT office.create_routine('w1', 'nightly', '{}', 'a1', id => 'rt')")
    office.execute("SELECT office.add_routine_trigger('rt', '0 3 * * *', id => 'tr-ok')")
    office.execute("SELECT office.add_routine_trigger('rt', '0 4 * * *', id => 'tr-bad')")
    healthy = client.get("/routines/rt").text
    assert "set aside" not in healthy
    office.execute("SELECT office.set_aside('cron', 'tr-bad', %s, 'XX000')", (HOSTILE,))
    page = client.get("/routines/rt").text
    rows = {
        row.split('title="', 1)[1].split('"', 1)[0]: row
        for row in page.split('<tr class="trigger')[1:]
    }
    assert "set aside" in rows["tr-bad"] and "set aside" not in rows["tr-ok"]
    assert str(escape(HOSTILE)) in rows["tr-bad"] and HOSTILE not in page
    assert '<span class="badge ok">active</span>' in rows["tr-ok"]


def test_a_task_page_shows_generations_and_why_there_is_no_receipt(
    client: TestClient, office: psycopg.Connection[Any]
) -> None:
    office.execute(
        "SELECT office.create_task('w1', id => 'c1', title => 'child', parent_id => 't1')"
    )
    page = client.get("/tasks/t1").text
    assert 'data-field="assignment-generation">0<' in page
    generation = office.execute("SELECT office.child_generation('t1')").fetchone()
    assert generation is not None and "<code title=" in page and str(generation[0]) in page
    assert "that path writes no receipt" in page
    assert "no receipt (no children)" in client.get("/tasks/c1").text
