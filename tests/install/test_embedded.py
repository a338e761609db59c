"""The embedded default database: started on demand, reused, stopped, reset,
and clear one-line errors when its port or directory cannot be used."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from controlplane import embedded, schema
from tests import harness

OFFICECTL = str(Path(sys.executable).with_name("officectl"))


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path("/dev/shm") / f"office-embedded-test-{os.getpid()}"
    try:
        yield path
    finally:
        embedded.EmbeddedDatabase(path).stop()
        subprocess.run(["rm", "-rf", str(path)], check=False)


def _officectl(
    home: Path, *args: str, port: int | str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OFFICE_DSN"}
    env["OFFICE_HOME"] = str(home)
    if port is not None:
        env["OFFICE_EMBEDDED_PORT"] = str(port)
    return subprocess.run([OFFICECTL, *args], capture_output=True, text=True, env=env, timeout=120)


def test_start_reuse_stop_reset(home: Path) -> None:
    database = embedded.EmbeddedDatabase(home, port=harness.free_port())
    first = database.ensure_running()
    assert first.running and first.server_version.startswith("18")
    with psycopg.connect(first.url) as conn:
        assert conn.execute("SELECT office.schema_version()").fetchone() == (
            schema.current_version(),
        )
        backend_pid_file = (home / "data" / "postmaster.pid").read_text().splitlines()[0]

    # A second user (no --port: the port of the last start sticks) reuses the server.
    again = embedded.EmbeddedDatabase(home).ensure_running()
    assert again.url == first.url
    assert (home / "data" / "postmaster.pid").read_text().splitlines()[0] == backend_pid_file

    assert database.stop() is True
    assert database.status().running is False
    assert database.stop() is False

    database.reset()
    assert not (home / "data").exists()
    assert database.status().initialized is False


def _bind_refused(port: int) -> bool:
    """Whether a bind without SO_REUSEADDR (the probe's old way) is refused."""
    with socket.socket() as plain:
        try:
            plain.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def test_a_port_held_only_by_time_wait_sockets_is_free(home: Path) -> None:
    """A connection the server side closed first lingers in TIME-WAIT on the
    server's port (a minute on Linux). The postmaster binds with
    SO_REUSEADDR, so the port can be listened on again at once: the probe
    says so too, and a start there works."""
    port = harness.free_port()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first
        assert client.recv(1) == b""
        client.close()
    assert _bind_refused(port), "no TIME-WAIT socket on the port: the test proves nothing"
    embedded.EmbeddedDatabase(home, port=port)._check_port_free(port)
    result = _officectl(home, "db", "url", port=port)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"postgresql://postgres@127.0.0.1:{port}/office"


def _closed_by_the_server(port: int) -> None:
    """A connection the server closes first (it refuses the startup packet
    of an unknown protocol), so its end lingers in TIME-WAIT on the server's
    port, as a client's Terminate leaves it."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall((8).to_bytes(4, "big") + (9 << 16).to_bytes(4, "big"))
        while conn.recv(4096):
            pass


def test_db_stop_then_start_again_at_once(home: Path) -> None:
    """officectl db stop (or reset), then db start or db url: the stopped
    server's connections in TIME-WAIT do not make its port "in use"."""
    port = harness.free_port()
    assert _officectl(home, "db", "start", port=port).returncode == 0
    url = _officectl(home, "db", "url").stdout.strip()
    _closed_by_the_server(port)
    assert "stopped" in _officectl(home, "db", "stop").stdout
    assert _bind_refused(port), "no TIME-WAIT socket on the port: the test proves nothing"
    again = _officectl(home, "db", "start")
    assert again.returncode == 0, again.stderr
    assert _officectl(home, "db", "url").stdout.strip() == url
    _closed_by_the_server(port)
    assert "deleted" in _officectl(home, "db", "reset", "--yes").stdout
    assert _bind_refused(port)
    restarted = _officectl(home, "db", "url")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == url
    # A port something listens on is still refused.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        with pytest.raises(embedded.EmbeddedError, match="is in use"):
            embedded.EmbeddedDatabase(home)._check_port_free(squatter.getsockname()[1])


def test_the_cli_uses_the_embedded_database_without_a_dsn(home: Path) -> None:
    port = harness.free_port()
    result = _officectl(home, "migrate", port=port)
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr  # it says where the database is
    assert f"office {schema.current_version()} via extension" in result.stdout

    status = _officectl(home, "db", "status")
    assert "running" in status.stdout and str(home / "data") in status.stdout

    url = _officectl(home, "db", "url").stdout.strip()
    assert url == f"postgresql://postgres@127.0.0.1:{port}/office"

    assert "stopped" in _officectl(home, "db", "stop").stdout
    assert "stopped" in _officectl(home, "db", "status").stdout
    assert "deleted" in _officectl(home, "db", "reset", "--yes").stdout
    assert not (home / "data").exists()


def test_a_busy_port_is_one_clear_line(home: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(embedded.EmbeddedError, match=f"port {port} on 127.0.0.1 is in use"):
            embedded.EmbeddedDatabase(home, port=port).ensure_running()

        result = _officectl(home, "migrate", port=port)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
    assert "OFFICE_EMBEDDED_PORT" in result.stderr


def test_an_unusable_data_directory_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    home = blocker / "office"
    with pytest.raises(embedded.EmbeddedError, match=f"data directory {home} is not usable"):
        embedded.EmbeddedDatabase(home, port=harness.free_port()).ensure_running()

    result = _officectl(home, "db", "url")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "is not usable" in result.stderr and "OFFICE_HOME" in result.stderr


def test_a_bad_port_setting_is_one_clear_line(home: Path) -> None:
    result = _officectl(home, "db", "url", port="nope")
    assert result.returncode == 1
    assert "OFFICE_EMBEDDED_PORT='nope' is not a port number" in result.stderr


def test_server_errors_are_one_line_with_the_sqlstate(dsn: str) -> None:
    result = subprocess.run(
        [OFFICECTL, "--dsn", dsn.replace("/office_", "/no_such_db_"), "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "does not exist" in result.stderr


def test_an_older_schema_is_upgraded_when_the_database_is_used(home: Path) -> None:
    database = embedded.EmbeddedDatabase(home, port=harness.free_port())
    url = database.ensure_running().url
    oldest = schema.upgrade_steps()[0][0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP EXTENSION office")
        # The schema PostgreSQL created for office.control stays behind.
        conn.execute("DROP SCHEMA office")
        conn.execute(f"CREATE EXTENSION office VERSION '{oldest}'")
        assert conn.execute("SELECT office.schema_version()").fetchone() == (oldest,)

    database.ensure_running()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT office.schema_version()").fetchone() == (
            schema.current_version(),
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="the server user only exists when run as root")
def test_a_home_inside_a_private_root_directory_works() -> None:
    # Like /root/.local/share/office: the directories on the way are root's and
    # closed to others. The server user must reach its data without root's
    # group (a 0701 /root grants "others" search but its group nothing).
    private = Path(f"/var/tmp/office-private-{os.getpid()}")
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    home = private / "share" / "office"
    try:
        status = embedded.EmbeddedDatabase(home, port=harness.free_port()).ensure_running()
        with psycopg.connect(status.url) as conn:
            assert conn.execute("SELECT office.schema_version()").fetchone() == (
                schema.current_version(),
            )
        assert private.stat().st_mode & 0o777 == 0o701  # search only, nothing readable
    finally:
        embedded.EmbeddedDatabase(home).stop()
        subprocess.run(["rm", "-rf", str(private)], check=False)
