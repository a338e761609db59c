"""How the dashboard shows a stored JSON value."""

from __future__ import annotations

import json

from controlplane.models.common import undecodable


def as_json(value: object) -> str:
    """A stored JSON value as JSON (sorted, indented), not Python's repr; a
    value the client could not decode, or one too deep to encode again, is
    "cannot display" and why, not a 500 for the whole page."""
    why = undecodable(value)
    if why is not None:
        return f"cannot display: {why}"
    try:
        return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
    except RecursionError:
        return "cannot display: nested too deep to show"
