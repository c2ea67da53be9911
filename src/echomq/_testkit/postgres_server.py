"""A private PostgreSQL server on a free loopback port, for tests and benchmarks.

``PostgresServer().start()`` makes a cluster with ``initdb`` in a temporary directory (trust
authentication, superuser ``postgres``, UTF-8), runs ``postgres`` on 127.0.0.1 with its
unix socket in that directory (never ``/var/run/postgresql``), and waits until the server
says it is ready. ``stop()`` shuts it down (fast) and removes the directory; ``kill()``
kills it like a crash (the directory stays; ``restart()`` starts it again on the same port,
with crash recovery). Nothing here touches a system-wide cluster.

Binaries: ``$ECHOMQ_PG_BIN`` (a directory), else ``initdb`` on ``$PATH``, else the newest
``/usr/lib/postgresql/<version>/bin`` (where Debian's ``postgresql`` package puts them).
PostgreSQL refuses to run as root: as root, ``initdb`` and ``postgres`` run through
``runuser -u postgres --`` and the directory is handed to that user.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from ..errors import EchoMQError
from . import lifeline
from .server_process import PortTaken, ServerProcess

__all__ = ["PostgresServer", "PostgresServerError", "find_postgres_bin"]

_SYSTEM_USER = "postgres"  # the OS user the server runs as when we are root
_INSTALL_HINT = (
    "Install PostgreSQL (Debian/Ubuntu: `sudo apt-get install postgresql`; Fedora: "
    "`sudo dnf install postgresql-server`; macOS: `brew install postgresql`), or set "
    "ECHOMQ_PG_BIN to the directory holding initdb and postgres."
)


class PostgresServerError(EchoMQError, RuntimeError):
    """PostgreSQL's binaries are missing, or the server did not start."""


def _version_key(path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in path.parent.name.split("."))
    except ValueError:
        return (0,)


def find_postgres_bin() -> Path:
    """The directory holding ``initdb`` and ``postgres``, or an error saying how to get them."""
    explicit = os.environ.get("ECHOMQ_PG_BIN")
    if explicit:
        where = Path(explicit)
        if not (where / "initdb").exists() or not (where / "postgres").exists():
            raise PostgresServerError(f"ECHOMQ_PG_BIN={explicit!r} holds no initdb and postgres")
        return where
    found = shutil.which("initdb")
    if found is not None:
        where = Path(found).resolve().parent
        if (where / "postgres").exists():
            return where
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key)
    for where in reversed(candidates):
        if (where / "initdb").exists() and (where / "postgres").exists():
            return where
    raise PostgresServerError(f"PostgreSQL's initdb and postgres were not found. {_INSTALL_HINT}")


@attrs.define(eq=False)
class PostgresServer(ServerProcess):
    """One private PostgreSQL server. ``start()``/``stop()``, or use it as a context manager.

    ``fsync=False`` (the default, for tests) skips the disk flushes; benchmarks pass
    ``fsync=True`` to measure durable commits. After ``start()``: ``port``, ``url``
    (``postgresql://postgres@127.0.0.1:PORT/postgres``) and ``dir``.
    """

    port: int = 0
    fsync: bool = False
    extra_args: Sequence[str] = ()
    startup_timeout: float = 30.0
    dir: Path | None = attrs.field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = attrs.field(default=None, init=False)
    _owned_dir: bool = attrs.field(default=False, init=False)

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        """The URL of another database on this server (create it first)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def data_dir(self) -> Path:
        assert self.dir is not None
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        assert self.dir is not None
        return self.dir / "postgres.log"

    def _as_owner(self, *command: str) -> list[str]:
        """``command`` run as the user that owns the cluster (``postgres`` when we are root)."""
        if os.geteuid() != 0:
            return list(command)
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PostgresServerError(
                "running as root needs runuser (util-linux) to drop to postgres"
            )
        return [runuser, "-u", _SYSTEM_USER, "--", *command]

    def _prepare_dir(self) -> None:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="echomq-pg-"))
            self._owned_dir = True
        if os.geteuid() == 0:
            try:
                shutil.chown(self.dir, _SYSTEM_USER, _SYSTEM_USER)
            except (LookupError, OSError) as exc:
                raise PostgresServerError(
                    f"as root the server runs as the {_SYSTEM_USER!r} user, which is missing "
                    f"({exc}); installing Debian's postgresql package creates it"
                ) from None
        if not (self.data_dir / "PG_VERSION").exists():
            initdb = str(find_postgres_bin() / "initdb")
            command = self._as_owner(
                initdb, "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
            )  # fmt: skip
            done = subprocess.run(
                command,
                capture_output=True,
                cwd=self.dir,
            )
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).decode(errors="replace").strip()[-2000:]
                raise PostgresServerError(f"initdb failed: {detail}")

    def command_line(self) -> list[str]:
        assert self.dir is not None
        postgres = str(find_postgres_bin() / "postgres")
        return self._as_owner(
            postgres,
            "-D", str(self.data_dir),
            "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self.dir}",
            "-c", f"fsync={'on' if self.fsync else 'off'}",
            "-c", f"full_page_writes={'on' if self.fsync else 'off'}",
            "-c", "max_connections=50",
            "-c", "logging_collector=off",
            *self.extra_args,
        )  # fmt: skip

    def start(self) -> PostgresServer:
        """Make the cluster (once per directory), start the server and wait until it is ready.

        Raises:
            PostgresServerError: the binaries are missing, initdb failed, the server exited
                early (its log is included) or was not ready within ``startup_timeout``.
        """
        if self.process is not None:
            raise PostgresServerError("already started")
        find_postgres_bin()
        self._prepare_dir()
        self._spawn_on_a_port(self._spawn, PostgresServerError)
        return self

    def _spawn(self) -> None:
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                self.command_line(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.dir,
                start_new_session=True,  # its own process group: kill() reaches every backend
            )
        lifeline.watch(self.process.pid, self.dir if self._owned_dir else None)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _ready(self) -> bool:
        """postmaster.pid's status line says ``ready`` and the port accepts a connection."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) < 8 or lines[7].strip() != "ready":
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self._log_tail()
                if "Address already in use" in tail.rsplit("starting PostgreSQL", 1)[-1]:
                    raise PortTaken
                raise PostgresServerError(f"postgres exited early: {tail}")
            if self._ready():
                return
            time.sleep(0.02)
        raise PostgresServerError(f"postgres was not ready in time: {self._log_tail()}")

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole server (every backend) like a crash, and wait for it to end.

        The directory stays: ``restart()`` recovers from it on the same port.
        """
        process, self.process = self.process, None
        if process is None:
            return
        postmaster = self._postmaster_pid()
        if process.poll() is None:
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass
        process.wait(timeout=30)
        lifeline.unwatch(process.pid)
        self._wait_gone(postmaster)

    def _wait_gone(self, pid: int | None) -> None:
        """Wait until the postmaster has ended (as root it is runuser's child, reaped by init)
        and the port is free: a new postmaster refuses a lock file whose process lives."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = False
            if pid is not None:
                try:
                    os.kill(pid, 0)
                    alive = True
                except ProcessLookupError:
                    pass
                except PermissionError:
                    alive = True
            if not alive:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", self.port)) != 0:
                        return
            time.sleep(0.02)

    def shutdown(self) -> None:
        """Fast shutdown (SIGINT to the postmaster): clients are disconnected, data kept."""
        process = self.process
        if process is None:
            return
        pid = self._postmaster_pid()
        if process.poll() is None and pid is not None:
            try:
                os.kill(pid, signal.SIGINT)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.kill()  # whatever is left (and the runuser parent)

    def restart(self) -> None:
        """Start again on the same port and directory (stopping it first if it runs)."""
        self.shutdown()
        self.start()

    def stop(self) -> None:
        """Shut the server down and remove the directory this server made."""
        self.shutdown()
        self._remove_owned_dir()
