"""One set of metrics per prometheus registry, for every part of the process.

prometheus_client refuses to register a metric name twice in one registry, yet
many clients (and workers, and the daemon's loops) share a registry and each
wants "its" counters. :func:`per_registry` is the one cache: the metrics a
``build`` function makes for a registry are made once and handed to every
caller after that. A registry that was collected and whose ``id`` was reused
is told apart by identity, so a fresh registry never gets a stale entry.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

__all__ = ["MetricsPortUnusable", "per_registry", "serve_metrics"]

M = TypeVar("M")

_lock = threading.Lock()
_built: dict[tuple[Callable[[CollectorRegistry], Any], int], tuple[CollectorRegistry, Any]] = {}


def per_registry(
    build: Callable[[CollectorRegistry], M], registry: CollectorRegistry | None = None
) -> M:
    """What ``build`` makes for ``registry`` (default: prometheus_client's
    global registry), built on first use and shared by every caller."""
    target = REGISTRY if registry is None else registry
    key = (build, id(target))
    with _lock:
        entry = _built.get(key)
        if entry is None or entry[0] is not target:
            entry = (target, build(target))
            _built[key] = entry
        metrics: M = entry[1]
        return metrics


class MetricsPortUnusable(OSError):
    """``--metrics-port`` cannot be served; the message is the one line the
    command prints (``officectl run``, ``officectl worker``)."""


def serve_metrics(port: int, addr: str, registry: CollectorRegistry | None = None) -> WSGIServer:
    """prometheus_client's endpoint on ``addr:port`` (0: any free port); a
    port in use or not allowed is :class:`MetricsPortUnusable`, one line
    naming the address and the option."""
    try:
        server, _ = start_http_server(port, addr=addr, registry=registry or REGISTRY)
    except OSError as exc:
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"is unusable ({exc.strerror})"
        raise MetricsPortUnusable(
            f"cannot serve metrics: {addr}:{port} {why}; choose another --metrics-port"
            " (0: any free port)"
        ) from None
    return server
