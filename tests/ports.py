"""The TCP ports the tests and benchmarks start servers on: below Linux's
ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default),
where the kernel picks the local port of every outgoing connection. A port
picked there is free when it is picked, but a connection made in the
meantime may take it before the server binds; and a fixed port there may be
held by one at any time. Standard library only: ``tests/run_suite.sh``
runs it (``python3 tests/ports.py``) before any virtual environment exists.
"""

from __future__ import annotations

import random
import socket

#: Where :func:`free_port` looks: below the ephemeral range.
FREE_PORTS = range(26000, 32768)

#: The suite's default server port (``OFFICE_TEST_PORT``) and the benchmarks'
#: (``OFFICE_BENCH_PORT``), for a cluster of one's own.
TEST_PORT = 26432
BENCH_PORT = 26440


def free_port() -> int:
    """A TCP port on 127.0.0.1 in :data:`FREE_PORTS` that nothing is bound
    to right now (a bind without SO_REUSEADDR, so not even a connection in
    TIME-WAIT), tried in random order so that concurrent runs rarely meet."""
    for port in random.sample(FREE_PORTS, len(FREE_PORTS)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port on 127.0.0.1 in {FREE_PORTS}")


if __name__ == "__main__":
    print(free_port())
