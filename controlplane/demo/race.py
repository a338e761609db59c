"""What every part of the race shares: where it connects, its length, the
seed's random streams, the ids' prefix, the ledger and the stop signal."""

from __future__ import annotations

import random
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg_pool import ConnectionPool

from controlplane.client import Office
from controlplane.demo.ledger import Ledger


class Race:
    def __init__(self, url: str, seconds: float, seed: int) -> None:
        self.url = url
        self.seconds = seconds
        self.seed = seed
        self.prefix = f"demo-{secrets.token_hex(3)}"
        self.ledger = Ledger()
        self.stop = threading.Event()

    def rng(self, name: str) -> random.Random:
        """The random stream of one thread: the same seed, the same choices."""
        return random.Random(f"{self.seed}:{name}")

    def pause(self, rng: random.Random, low: float, high: float) -> None:
        self.stop.wait(rng.uniform(low, high))


@contextmanager
def connect(url: str, options: str | None = None) -> Iterator[Office]:
    """An Office on a one-connection pool of its own (one producer thread)."""
    kwargs: dict[str, Any] = {"autocommit": True, "application_name": "officectl demo"}
    if options:
        kwargs["options"] = options
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=1, kwargs=kwargs, open=True, num_workers=1, timeout=30
    )
    try:
        yield Office(pool=pool)
    finally:
        pool.close()
