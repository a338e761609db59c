"""The overview's chart of enqueue outcomes, sampled by the UI and drawn as
SVG on the server (no script, nothing fetched).

The database counts outcomes without time (``office.dedup_stats`` sums
counters; ``office.queue_stats`` counts runs), so the UI samples those totals
when the overview is drawn and plots how far each grew over the last hour.
``skipped`` is counted by no view, so it is not drawn.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

#: The series of the chart, in drawing order, with their colours.
SERIES = {"queued": "#2b6cb0", "deduped": "#b7791f", "coalesced": "#2f855a"}
WINDOW = timedelta(hours=1)
#: Samples closer together than this are one sample (a page reloaded in a loop
#: does not grow the history).
MIN_SPACING = timedelta(seconds=5)
WIDTH, HEIGHT, PAD = 640, 180, 32


@dataclass(frozen=True)
class Sample:
    at: datetime
    totals: dict[str, int]


class Sampler:
    """The last hour of outcome totals, shared by the app's request threads."""

    def __init__(self) -> None:
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()

    def record(self, at: datetime, totals: dict[str, int]) -> None:
        with self._lock:
            if self._samples and at - self._samples[-1].at < MIN_SPACING:
                self._samples[-1] = Sample(self._samples[-1].at, totals)
            else:
                self._samples.append(Sample(at, totals))
            while self._samples and at - self._samples[0].at > WINDOW:
                self._samples.popleft()

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


def render(samples: list[Sample]) -> Markup:
    """The SVG: each series' growth since the first sample of the window."""
    title = "Enqueue outcomes over the last hour (growth since the first sample)"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT + 24}" width="{WIDTH}" height="{HEIGHT + 24}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{PAD}" y="4" width="{WIDTH - 2 * PAD}" height="{HEIGHT - PAD}" '
        'fill="none" stroke="#ccc"/>',
    ]
    if len(samples) < 2:
        parts.append(
            f'<text x="{WIDTH // 2}" y="{HEIGHT // 2}" text-anchor="middle" fill="#666">'
            "sampling: the chart fills in as the overview is reloaded</text>"
        )
    else:
        first, last = samples[0], samples[-1]
        span = max((last.at - first.at).total_seconds(), 1.0)
        grown = {
            name: [s.totals.get(name, 0) - first.totals.get(name, 0) for s in samples]
            for name in SERIES
        }
        top = max(1, *(max(values) for values in grown.values()))
        for name, colour in SERIES.items():
            points = " ".join(
                f"{PAD + (s.at - first.at).total_seconds() / span * (WIDTH - 2 * PAD):.1f},"
                f"{4 + (HEIGHT - PAD) * (1 - max(v, 0) / top):.1f}"
                for s, v in zip(samples, grown[name], strict=True)
            )
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
            )
        parts.append(f'<text x="{PAD - 4}" y="12" text-anchor="end" font-size="10">{top}</text>')
        parts.append(
            f'<text x="{PAD - 4}" y="{HEIGHT - PAD + 4}" text-anchor="end" font-size="10">0</text>'
        )
    x = PAD
    for name, colour in SERIES.items():
        total = samples[-1].totals.get(name, 0) if samples else 0
        parts.append(
            f'<rect x="{x}" y="{HEIGHT + 6}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{HEIGHT + 15}" font-size="12">{name} ({total})</text>'
        )
        x += 160
    parts.append("</svg>")
    # Every value interpolated above is a number or a fixed word of this module.
    return Markup("".join(parts))
