"""A private ``redis-server`` child process on a free loopback port, for tests and demos.

Persistence is off by default (``--save '' --appendonly no``); ``appendonly=True`` turns
AOF on with ``--appendfsync no``: Redis then writes the file at every turn of its loop,
before it replies (with ``everysec`` it postpones that write while a background fsync is
running, up to 2 s, and still replies: a crash of the process could lose acknowledged
writes), and leaves flushing to the kernel, which a process crash does not undo.
``tls=True`` makes a self-signed CA and server certificate (with ``openssl``) and serves
TLS only. Use it from Trio (``async with open_redis_server()`` or
``await nursery.start(serve_redis_server)``) or from blocking code (``RedisServer`` as a
context manager, which pytest fixtures use). No test depends on a system-wide Redis.
``echomq.testing`` re-exports everything public here.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from ..errors import EchoMQError
from . import lifeline
from .server_process import PortTaken, ServerProcess, free_port

__all__ = [
    "RedisServer",
    "RedisServerError",
    "find_redis_server",
    "free_port",
    "open_redis_server",
    "serve_redis_server",
]


class RedisServerError(EchoMQError, RuntimeError):
    """redis-server is missing, or did not start."""


def find_redis_server() -> str:
    """Path of the server binary, or a clear error saying how to install it.

    ``$ECHOMQ_REDIS_SERVER`` names it explicitly (e.g. a ``valkey-server``); otherwise
    ``redis-server``, then ``valkey-server``, is looked up on ``$PATH``.
    """
    explicit = os.environ.get("ECHOMQ_REDIS_SERVER")
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise RedisServerError(
                f"ECHOMQ_REDIS_SERVER={explicit!r} is not an executable redis-server"
            )
        return found
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found is None:
        raise RedisServerError(
            "redis-server was not found on PATH. Install Redis 7 (Debian/Ubuntu: "
            "`sudo apt-get install redis-server`; macOS: `brew install redis`) or Valkey, "
            "set ECHOMQ_REDIS_SERVER to its path, or pass a redis:// URL."
        )
    return found


def _make_certs(directory: Path) -> dict[str, str]:
    """A self-signed CA and a server certificate for 127.0.0.1/localhost, via openssl.

    Made once per directory: a restarted server keeps the CA its clients already trust.
    """
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    certs = {"ca": str(ca_crt), "cert": str(crt), "key": str(key)}
    if crt.exists():
        return certs
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RedisServerError(
            "openssl is needed to make test certificates (apt-get install openssl)"
        )
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=echomq-test-ca", "-keyout", str(ca_key), "-out", str(ca_crt))  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(key), "-out", str(csr))  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return certs


@attrs.define(eq=False)
class RedisServer(ServerProcess):
    """One private redis-server. ``start()``/``stop()``, or use it as a context manager.

    Attributes after start: ``port``, ``url`` (``redis://`` or ``rediss://``), ``dir``, and
    with TLS ``ca_file`` (the CA that signed the server certificate).
    """

    appendonly: bool = False
    tls: bool = False
    password: str | None = None
    extra_args: Sequence[str] = ()
    port: int = 0
    startup_timeout: float = 10.0
    dir: Path | None = attrs.field(default=None, init=False)
    ca_file: str | None = attrs.field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = attrs.field(default=None, init=False)
    _owned_dir: bool = attrs.field(default=False, init=False)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca_file}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def command_line(self) -> list[str]:
        assert self.dir is not None
        args = [
            find_redis_server(),
            "--bind", "127.0.0.1",
            "--port", "0" if self.tls else str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "no",  # written before each reply, never postponed (above)
            "--protected-mode", "no",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls:
            certs = _make_certs(self.dir)
            self.ca_file = certs["ca"]
            args += [
                "--tls-port", str(self.port),
                "--tls-cert-file", certs["cert"],
                "--tls-key-file", certs["key"],
                "--tls-ca-cert-file", certs["ca"],
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        return [*args, *self.extra_args]

    def start(self) -> RedisServer:
        """Start the process and wait until it answers PING (``startup_timeout``).

        Raises:
            RedisServerError: redis-server is missing, exited early (its own message is
                included), or did not answer in time.
        """
        if self.process is not None:
            raise RedisServerError("already started")
        find_redis_server()  # a clear error before anything is made
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="echomq-redis-"))
            self._owned_dir = True
        self._spawn_on_a_port(self._spawn, RedisServerError)
        return self

    def _spawn(self) -> None:
        self.process = subprocess.Popen(
            self.command_line(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, not the child
        )
        lifeline.watch(self.process.pid, self.dir if self._owned_dir else None)
        try:
            self._wait_ready()
        except BaseException:
            self._reap()
            raise

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                detail = self._early_exit_detail()
                if "Address already in use" in detail:
                    raise PortTaken
                raise RedisServerError(f"redis-server exited early: {detail}")
            if self._ping():
                return
            time.sleep(0.01)
        raise RedisServerError(f"redis-server did not answer PING in time: {self._log_tail()}")

    def _early_exit_detail(self) -> str:
        assert self.process is not None and self.process.stderr is not None
        stderr = self.process.stderr.read().decode(errors="replace").strip()
        return "\n".join(part for part in (stderr, self._log_tail().strip()) if part)[-2000:]

    def _reap(self) -> None:
        """Stop the process if it runs, and release its pipe."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        lifeline.unwatch(self.process.pid)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def _ping(self) -> bool:
        if self.tls:
            import ssl

            ctx = ssl.create_default_context(cafile=self.ca_file)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                        return self._ping_on(s)
            except OSError:
                return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                return self._ping_on(s)
        except OSError:
            return False

    def _ping_on(self, s: socket.socket) -> bool:
        if self.password:
            secret = self.password.encode()
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(secret), secret))
            s.recv(64)
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")

    def _log_tail(self) -> str:
        if self.dir is not None and (self.dir / "redis.log").exists():
            return (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the process (SIGKILL by default) and wait for it; the port is then free."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)
            lifeline.unwatch(self.process.pid)

    def restart(self) -> None:
        """Start again on the same port and directory (killing it first if it runs).

        With ``appendonly=True`` the data written before is still there; without, it is
        gone. With ``tls=True`` the same CA signs the certificate.
        """
        self.kill()
        self._reap()
        self.start()

    def stop(self) -> None:
        """Terminate the process and remove the directory this server made."""
        self._reap()
        self._remove_owned_dir()


@asynccontextmanager
async def open_redis_server(
    *,
    appendonly: bool = False,
    tls: bool = False,
    password: str | None = None,
    extra_args: Sequence[str] = (),
    port: int = 0,
) -> AsyncIterator[RedisServer]:
    """Start a private redis-server for the duration of an ``async with`` block."""
    server = RedisServer(
        appendonly=appendonly, tls=tls, password=password, extra_args=extra_args, port=port
    )
    await trio.to_thread.run_sync(server.start)
    try:
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.stop)


async def serve_redis_server(
    *,
    task_status: trio.TaskStatus[RedisServer] = trio.TASK_STATUS_IGNORED,
    appendonly: bool = False,
    tls: bool = False,
    password: str | None = None,
    extra_args: Sequence[str] = (),
    port: int = 0,
) -> None:
    """Run a private redis-server until cancelled; ``nursery.start`` answers the server.

    ``await nursery.start(functools.partial(serve_redis_server, tls=True))`` for options.
    """
    async with open_redis_server(
        appendonly=appendonly, tls=tls, password=password, extra_args=extra_args, port=port
    ) as server:
        task_status.started(server)
        await trio.sleep_forever()
