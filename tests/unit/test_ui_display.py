"""How the dashboard shows values (controlplane/ui/display.py): pure
functions, checked without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from controlplane.models import RunStatus
from controlplane.ui import display

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def test_a_uuid_keeps_its_random_tail_and_a_long_id_its_head() -> None:
    burst = ["0193a1b2-c3d4-7e5f-8a9b-0123456789ab", "0193a1b2-c3d4-7e5f-8a9b-ba9876543210"]
    shown = [display.short_id(v) for v in burst]
    assert shown == ["…456789ab", "…76543210"]  # same clock, told apart
    assert display.short_id("issue-0") == "issue-0"
    long = "x" * 40
    assert display.short_id(long) == "x" * 16 + "…" and len(display.short_id(long)) == 17


def test_relative_times_both_ways_and_none() -> None:
    assert display.ago(NOW - timedelta(seconds=12), NOW) == "12 s ago"
    assert display.ago(NOW - timedelta(minutes=5), NOW) == "5 min ago"
    assert display.ago(NOW - timedelta(hours=3), NOW) == "3 h ago"
    assert display.ago(NOW - timedelta(days=4), NOW) == "4 d ago"
    assert display.ago(NOW + timedelta(seconds=90), NOW) == "in 90 s"
    assert display.ago(None, NOW) == "—"
    assert display.utc(NOW) == "2026-12-07 12:00:00 UTC"


def test_labels_never_show_snake_case() -> None:
    assert display.label("assignee_agent_profile_id") == "assignee"
    assert display.label("is_ephemeral") == "ephemeral"
    assert display.label("some_new_column") == "some new column"


def test_badges_by_status_word_in_any_case() -> None:
    assert display.badge("failed") == "badge bad"
    assert display.badge("COMPLETED") == "badge ok"
    assert display.badge(RunStatus.QUEUED) == "badge wait"
    assert display.badge("whatever") == "badge plain"


def test_column_kinds_follow_the_annotation() -> None:
    cases: list[tuple[str, Any, str]] = [
        ("created_at", datetime | None, "time"),
        ("is_ephemeral", bool, "bool"),
        ("assignment_generation", int, "number"),
        ("budget", Decimal | None, "number"),
        ("payload", dict[str, Any], "json"),
        ("status", RunStatus, "status"),
        ("parent_id", str | None, "id"),
        ("title", str, "text"),
    ]
    for name, annotation, kind in cases:
        assert display.column_kind(name, annotation) == kind, name
