"""The trio wire: one RESP2 connection that multiplexes every concurrent caller.

Rule 1 (auto-pipelining): callers never wait for each other's round trips. A call packs
its command (hiredis). When nothing is in flight it is written at once, by the caller
(a plain non-blocking ``send``: one caller alone pays no task switch). Otherwise it is
queued, and one writer task sends everything queued since its last write in a single
write; but the caller that makes 32 queued commands writes them itself at once, so the
server starts on them while the other callers of this tick still pack theirs.
One reader task parses replies (hiredis) and hands each to the caller whose
command was next in line. Replies come back in order.
Rule 2 (no replay): when the socket drops, every command queued or in flight fails with
:class:`~echomq.errors.ConnectionLost`. Nothing is re-sent: a script may have run.
The next call reconnects, with backoff, within ``connect_timeout``.
Rule 3 (cancellation): a call cancelled before its bytes were written is never sent; a
call cancelled after is run by the server and its reply dropped.
Rule 4: a server that answers a transient refusal (``LOADING``, ``BUSY``, ``MASTERDOWN``,
``TRYAGAIN``...: ``server_errors.TRANSIENT``) did not run the command: it is sent again after
a backoff, within ``connect_timeout``, then raises ``Unavailable``.

Plain TCP and unix sockets are driven directly (``recv_into`` one reused buffer,
``send`` without a task switch); TLS goes through a ``trio.SSLStream``.
The wire knows nothing about jobs.
"""

from __future__ import annotations

import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar, cast

import hiredis
import outcome
import trio

from .._jitter import Backoff
from .._trio import open_service_nursery
from ..config import ConnectionConfig, parse_url
from ..errors import ConnectionLost, TLSError
from .server_errors import is_transient, server_error

__all__ = [
    "Arg",
    "CommandHead",
    "Connection",
    "Rendezvous",
    "ReplyError",
    "open_connection",
    "new_parser",
    "open_stream",
    "pack",
    "probe",
]

Arg = str | bytes | int | float
T = TypeVar("T")

TRANSPORT_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    hiredis.ProtocolError,
)
# a TLS peer that hung up mid-handshake: the server may be restarting (transient)
_SSL_TRANSIENT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
_CHUNK = 1 << 16  # receive size: large reads cost an allocation each (see docs/wire.md)
# queued commands a caller writes itself (the writer task would send them a tick later):
# the server starts on them while this tick's other callers still pack theirs
_FLUSH_AT = 32
_SYNC_READS = 16  # consecutive reads without a checkpoint before the reader yields


class ReplyError(Exception):
    """An error reply as hiredis hands it over (also inside arrays); see ``ServerError``."""


class Parser(Protocol):
    """The part of ``hiredis.Reader`` the wire uses (its bundled stubs are too narrow)."""

    def feed(self, buf: bytes | bytearray | memoryview, off: int = ..., len: int = ...) -> None:
        """Append raw bytes from the socket."""

    def gets(self) -> Any:
        """The next complete reply, or ``False``."""


def new_parser() -> Parser:
    """A hiredis reply parser whose error replies are :class:`ReplyError` values."""
    return cast(Parser, hiredis.Reader(replyError=ReplyError))


pack_command = cast(Callable[[tuple[Arg, ...]], bytes], hiredis.pack_command)


def pack(args: Sequence[Arg]) -> bytes:
    """Pack one command as RESP bytes (hiredis)."""
    return pack_command(tuple(args))


class CommandHead:
    """The first arguments of a command made again and again with ``tail`` more arguments
    each time (a script's ``EVALSHA``, its keys and the argv that repeats), packed once:
    :meth:`pack` adds a call's last arguments, already bytes, without packing the head
    again (the same bytes as :func:`pack` of every argument)."""

    __slots__ = ("_format", "head")

    def __init__(self, args: Sequence[Arg], tail: int) -> None:
        packed = pack_command(tuple(args))
        # ``*<count>\r\n`` counts the tail too; the head's own arguments follow
        self.head = b"*%d\r\n" % (len(args) + tail) + packed[packed.index(b"\r\n") + 2 :]
        self._format = b"%b" + b"$%d\r\n%b\r\n" * tail

    def pack(self, *tail: bytes) -> bytes:
        """The whole command: the head, then ``tail`` (as many as the head was made for)."""
        values: list[bytes | int] = [self.head]
        for value in tail:
            values += (len(value), value)
        return self._format % tuple(values)


async def open_stream(config: ConnectionConfig) -> trio.abc.Stream:
    """Open the byte stream (TCP, unix socket, or TLS over TCP) for ``config``.

    Raises:
        TLSError: the TLS settings are unusable (a missing or bad file: before any I/O),
            or the handshake failed for good (a certificate nobody trusts...).
    """
    # a TLS configuration error is raised before the socket: not an outage, even when
    # nothing listens there yet
    context = config.make_ssl_context() if config.tls and not config.unix_path else None
    with trio.fail_after(config.connect_timeout):
        if config.unix_path:
            return await trio.open_unix_socket(config.unix_path)
        stream: trio.abc.Stream = await trio.open_tcp_stream(config.host, config.port)
        if context is not None:
            tls = trio.SSLStream(stream, context, server_hostname=config.host)
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                await trio.aclose_forcefully(tls)
                cause = exc.__cause__
                if isinstance(cause, ssl.SSLError) and not isinstance(cause, _SSL_TRANSIENT):
                    # a certificate nobody trusts, a peer that does not speak TLS: retrying
                    # cannot help (a peer that hung up mid-handshake may be restarting)
                    what = (
                        "certificate check"
                        if isinstance(cause, ssl.SSLCertVerificationError)
                        else "handshake"
                    )
                    raise TLSError(f"TLS {what} failed for {config.display}: {cause}") from exc
                raise
            stream = tls
        return stream


def _name(word: Arg) -> str:
    """A command's name, upper case (for an error that names it)."""
    text = word.decode(errors="replace") if isinstance(word, bytes) else str(word)
    return text.upper()


def _packed_name(packed: bytes) -> str | None:
    """The name of the first command in RESP bytes (``*N\r\n$L\r\nNAME\r\n``)."""
    parts = packed.split(b"\r\n", 3)
    return _name(parts[2]) if len(parts) > 2 else None


def _detach(stream: trio.abc.Stream) -> socket.socket | None:
    """The plain socket under ``stream`` (now owned by the caller), or None for TLS."""
    if isinstance(stream, trio.SocketStream):
        sock = socket.socket(fileno=stream.socket.detach())
        sock.setblocking(False)
        return sock
    return None


_PENDING: Any = object()  # a direct reader's reply not read yet


class Rendezvous(Generic[T]):
    """Callers that wait together, each woken with an answer of its own (a batch's
    callers: the trio coalescer's, ``_client/coalesce.py``).

    ``wait()`` takes the next place (``len(r)`` before the call) for the calling task and
    answers the coroutine to await: it returns what :meth:`answer` gives that place, or
    raises what :meth:`fail` gives it. A caller cancelled while it waits leaves its place
    (:meth:`gone` is then true, and an answer for it is dropped).

    Why not a ``trio.Event`` per batch and the answers beside it (and why here, where the
    wire's hand-driven trio lives): the coalescer parks every caller queued behind an
    enqueue in flight, a hundred at a time for a nursery of producers, and each object a
    parked caller holds is one more for the garbage collector to count. An event's waiter
    holds ``Event.wait``'s and ``ParkingLot.park``'s coroutines, park's abort closure and
    its cell, and needs a coroutine of its own around the wait to read its answer: enough
    to double the collections a concurrent producer triggers, full ones included. Here a
    waiter is one small object (its own abort function) and trio's own wait coroutine.
    ``benchmarks/producer_cpu.py`` (mode ``concurrent``: 100 concurrent ``delay()``
    callers; CPU per job) guards it.
    """

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: list[_Parked] = []

    def __len__(self) -> int:
        return len(self._parked)

    def wait(self) -> Coroutine[Any, Any, T]:
        """Take the next place for this task; await the answer for it (not awaited:
        :meth:`leave` it and ``close()`` the coroutine)."""
        parked = _Parked(trio.lowlevel.current_task())
        self._parked.append(parked)
        waiting = trio.lowlevel.wait_task_rescheduled(parked)  # noqa: ASYNC105 - awaited by the caller
        return cast(Coroutine[Any, Any, T], waiting)

    def gone(self, place: int) -> bool:
        """Whether the caller of ``place`` left (cancelled) or was answered."""
        return self._parked[place].gone

    def leave(self, place: int) -> None:
        """The caller of ``place`` takes its wait back before awaiting it."""
        self._parked[place].gone = True

    def answer(self, place: int, value: T) -> None:
        self._wake(place, outcome.Value(value))

    def fail(self, place: int, error: BaseException) -> None:
        self._wake(place, outcome.Error(error))

    def _wake(self, place: int, result: outcome.Outcome[T]) -> None:
        parked = self._parked[place]
        if not parked.gone:
            parked.gone = True
            trio.lowlevel.reschedule(parked.task, result)


class _Parked:
    """One waiter of a :class:`Rendezvous`: its task, and ``gone`` once answered or
    cancelled; its own ``abort_func`` (no closure per waiter)."""

    __slots__ = ("gone", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.gone = False

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        self.gone = True
        return trio.lowlevel.Abort.SUCCEEDED


class _Waiter:
    """One caller waiting for ``expect`` replies (more than one: a pipeline, see
    :meth:`Connection.execute_pipeline`, whose replies gather in ``replies``).

    ``task`` None: the caller reads the socket itself (:meth:`_Session.read_own`), so it
    is not parked: its reply is left in ``reply`` instead of rescheduling it."""

    __slots__ = ("abandoned", "expect", "replies", "reply", "task")

    def __init__(self, expect: int = 1) -> None:
        self.task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
        self.abandoned = False
        self.expect = expect
        self.replies: list[Any] | None = [] if expect > 1 else None
        self.reply: Any = _PENDING

    def enqueue_on(self, inflight: deque[_Waiter]) -> None:
        """Take ``expect`` places in line: one per reply."""
        if self.expect == 1:
            inflight.append(self)
        else:
            inflight.extend([self] * self.expect)


class _Session:
    """One socket: a reader task and a writer task, and the callers between them."""

    def __init__(self, stream: trio.abc.Stream, label: str) -> None:
        self.stream = stream
        self.sock = _detach(stream)  # None: TLS, everything goes through ``stream``
        self.label = label
        self.parser = new_parser()
        self.buf = bytearray(_CHUNK)  # receive buffer (of the reader, or of a direct reader)
        self.queued: list[tuple[bytes, _Waiter | None]] = []
        self.inflight: deque[_Waiter] = deque()
        self.writing = False
        self.alone = True  # the last batch of replies woke one caller: serial use
        self.direct = False  # a caller reads its own reply from the socket (read_own)
        self.reader: trio.lowlevel.Task | None = None  # the reader task, while parked
        self.wakeup = trio.Event()
        self.broken: ConnectionLost | None = None
        self.scope = trio.CancelScope()

    async def request(self, packed: bytes, expect: int = 1) -> Any:
        """Send ``packed`` (``expect`` commands) and answer the reply (a list of replies
        when ``expect`` > 1)."""
        if self.broken is not None:
            raise self.broken
        sock = self.sock
        waiter = _Waiter(expect)
        if (
            self.alone
            and sock is not None
            and not self.inflight
            and not self.queued
            and not self.writing
        ):
            # The pipe is idle and the last reply woke only its own caller (no company
            # expected in this tick): write now, from this task. Checked first, so a
            # caller cancelled before it got here sends nothing.
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                sent = sock.send(packed)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise self.fail(exc) from exc
            waiter.enqueue_on(self.inflight)
            if sent < len(packed):  # the writer sends the rest before anything else
                self.queued.append((packed[sent:], None))
                self.wakeup.set()
            return await self.read_own(waiter)
        elif sock is not None and not self.writing and len(self.queued) >= _FLUSH_AT - 1:
            # A full batch waits: write it now, from this task, so that the server starts
            # on it while the callers still to run this tick pack theirs (the overlap).
            await trio.lowlevel.checkpoint_if_cancelled()
            batch, self.queued = self.queued, []
            batch.append((packed, waiter))
            data = self._take(batch)
            try:
                sent = sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                waiter.abandoned = True  # in line already: fail() must not wake this task
                raise self.fail(exc) from exc
            if sent < len(data):  # the writer sends the rest before anything else
                self.queued.insert(0, (data[sent:], None))
                self.wakeup.set()
        else:
            self.queued.append((packed, waiter))
            self.wakeup.set()

        def abort(_: object) -> trio.lowlevel.Abort:
            waiter.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    async def read_own(self, waiter: _Waiter) -> Any:
        """Read the socket in this task until ``waiter`` (just sent, first in line) has
        its reply: no hop through the reader task for a lone caller. Replies of callers
        in line behind it that come meanwhile go to them; the reader task takes over
        when this ends (answered, cancelled or failed) with callers still in line.

        Cancelled while waiting: the command was sent, so its reply is dropped when it
        comes (rule 3), and the reply order holds: the waiter keeps its place in line.
        """
        sock = self.sock
        assert sock is not None
        waiter.task = None  # not parked: deliver() leaves the reply on the waiter
        self.direct = True
        try:
            while waiter.reply is _PENDING:
                await trio.lowlevel.wait_readable(sock)
                try:
                    size = sock.recv_into(self.buf)
                except BlockingIOError:
                    continue
                if not size:
                    raise trio.BrokenResourceError("server closed the connection")
                self.parser.feed(self.buf, 0, size)
                self.deliver()
        except TRANSPORT_ERRORS as exc:
            broken = self.fail(exc)  # (its waiter, if still in line, is not rescheduled)
            if waiter.reply is _PENDING:
                raise broken from exc
            # its reply came before the failure (e.g. a stray reply after it): answered
        except BaseException:  # cancelled: its reply is dropped when it comes
            waiter.abandoned = True
            raise
        finally:
            self.direct = False
            if self.inflight:
                self.wake_reader()
        return waiter.reply

    def idle_closed(self) -> bool:
        """Whether the server closed this socket while nothing was in flight (then the
        session is failed, and the caller opens another). Nobody watches an idle plain
        socket (the reader task parks, so a lone caller can read its own reply), so a
        call that finds it idle looks first: one non-blocking peek."""
        sock = self.sock
        if sock is None or self.inflight or self.queued or self.writing:
            return False
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError as exc:
            self.fail(exc)
            return True
        self.fail(trio.BrokenResourceError(f"unexpected reply {data!r}" if data else "closed"))
        return True

    def wake_reader(self) -> None:
        """Callers are in line and nobody reads: the parked reader task takes over."""
        task = self.reader
        if task is not None and not self.direct:
            self.reader = None
            trio.lowlevel.reschedule(task)

    async def _park_reader(self) -> None:
        self.reader = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self.reader = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def fail(self, exc: BaseException | None) -> ConnectionLost:
        """Break the session: every caller queued or in flight gets ConnectionLost."""
        broken = self.broken
        if broken is None:
            detail = f": {exc!r}" if exc is not None else ""
            broken = self.broken = ConnectionLost(f"connection to {self.label} lost{detail}")
        for _, waiter in self.queued:
            if waiter is not None:
                self._wake(waiter, outcome.Error(broken))
        self.queued.clear()
        while self.inflight:
            self._wake(self.inflight.popleft(), outcome.Error(broken))
        if self.direct and self.sock is not None:
            # a caller waits on the socket itself (read_own): it wakes with
            # ClosedResourceError and raises ``broken``
            trio.lowlevel.notify_closing(self.sock)
        self.scope.cancel()
        return broken

    @staticmethod
    def _wake(waiter: _Waiter, result: outcome.Outcome[Any]) -> None:
        if not waiter.abandoned:
            waiter.abandoned = True
            if waiter.task is not None:  # (None: a direct reader, woken by notify_closing)
                trio.lowlevel.reschedule(waiter.task, result)

    async def write_loop(self) -> None:
        send = self._send_raw if self.sock is not None else self.stream.send_all
        while True:
            if not self.queued:
                self.wakeup = trio.Event()
                await self.wakeup.wait()
                continue
            batch, self.queued = self.queued, []
            data = self._take(batch)
            if data:
                self.writing = True
                await send(data)
                self.writing = False

    def _take(self, batch: list[tuple[bytes, _Waiter | None]]) -> bytes:
        """The bytes of ``batch`` to write, its callers put in line for their replies."""
        inflight = self.inflight
        chunks = []
        for packed, waiter in batch:
            if waiter is None:  # the rest of a direct write
                chunks.append(packed)
            elif not waiter.abandoned:  # cancelled before it was written: never sent
                chunks.append(packed)
                waiter.enqueue_on(inflight)
        if inflight and self.reader is not None:
            self.wake_reader()
        return b"".join(chunks)

    async def _send_raw(self, data: bytes) -> None:
        sock = self.sock
        assert sock is not None
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)

    async def read_loop(self) -> None:
        parser, inflight = self.parser, self.inflight
        sock = self.sock
        buf = self.buf
        streak = 0
        while True:
            if sock is None:
                data = await self.stream.receive_some(_CHUNK)
                size = len(data)
                parser.feed(data)
            else:
                if not inflight or self.direct:
                    # nothing to read, or a caller reads its own reply: parked until
                    # callers are in line (an idle socket is looked at by idle_closed)
                    streak = 0
                    await self._park_reader()
                    continue
                try:
                    size = sock.recv_into(buf)
                except BlockingIOError:
                    streak = 0
                    await trio.lowlevel.wait_readable(sock)
                    continue
                parser.feed(buf, 0, size)
                streak += 1
                if streak >= _SYNC_READS:  # a long stream of replies: let others run
                    streak = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
            if not size:
                raise trio.BrokenResourceError("server closed the connection")
            self.deliver()

    def deliver(self) -> None:
        """Hand each complete reply in the parser to the caller next in line."""
        parser, inflight = self.parser, self.inflight
        woken = 0
        while (reply := parser.gets()) is not False:
            try:
                waiter = inflight.popleft()
            except IndexError:
                raise trio.BrokenResourceError(f"unexpected reply {reply!r}") from None
            if not waiter.abandoned:
                gathered = waiter.replies
                if gathered is not None:  # a pipeline: wake its caller at the last reply
                    gathered.append(reply)
                    if len(gathered) < waiter.expect:
                        continue
                    reply = gathered
                waiter.abandoned = True
                task = waiter.task
                if task is None:  # a direct reader (read_own): running, not parked
                    waiter.reply = reply
                else:
                    trio.lowlevel.reschedule(task, outcome.Value(reply))
                    woken += 1
        if woken:
            self.alone = woken == 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guard, self.read_loop)
                    nursery.start_soon(self._guard, self.write_loop)
                    task_status.started()
        finally:
            self.fail(None)
            await self._close()

    async def _close(self) -> None:
        if self.sock is not None:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()
            return
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                await self.stream.aclose()
            except TRANSPORT_ERRORS:
                pass

    async def _guard(self, loop: Callable[[], Any]) -> None:
        try:
            await loop()
        except TRANSPORT_ERRORS as exc:
            self.fail(exc)


class Connection:
    """A multiplexed, auto-pipelined RESP connection. Open one with ``echomq.connect``
    (``_wire/dial.py``).

    Safe to share between any number of tasks. Use a connection of its own for blocking
    commands (BLPOP) and for pub/sub (:mod:`echomq._wire.pubsub`).
    """

    sharded_pubsub = False  # True on a cluster: scripts publish with SPUBLISH (scripts.py)

    def __init__(self, config: ConnectionConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self._nursery = nursery
        self._session: _Session | None = None
        self._lock = trio.Lock()
        self._attempts = 0  # connect attempts finished (success or not)
        self._last_failure: ConnectionLost | None = None
        self._closed = False
        self.reconnects = 0

    async def execute(self, *args: Arg) -> Any:
        """Send one command and return its reply; an error reply raises ``ServerError``.

        Raises:
            ConnectionLost: the socket dropped before the reply came (never replayed), or
                no connection could be made within ``connect_timeout``.
            TLSError: the TLS handshake failed (not retried).
            AuthenticationError: wrong or missing credentials (a ``ServerError``).
            PermissionDenied: the ACL user may not do that (a ``ServerError``).
            ServerError: the server answered an error (after retrying transient ones).
        """
        return await self.execute_packed(pack_command(args))

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send several commands in one write, in order; answer all their replies.

        An error reply is answered in place as a ``ServerError`` instance (not raised), and
        nothing is retried: the caller decides. One use: a command behind a blocking one
        (``BLPOP`` then a script) runs on the server the moment the first unblocks, with
        no round trip between them. If the caller is cancelled once the bytes are
        written, the server still runs every command.

        Raises:
            ConnectionLost: as :meth:`execute`.
        """
        if not commands:
            return []
        packed = b"".join(pack_command(tuple(command)) for command in commands)
        session = self._session
        if session is None or session.broken is not None or session.idle_closed():
            session = await self._connect()
        if len(commands) == 1:
            replies = [await session.request(packed)]
        else:
            replies = await session.request(packed, len(commands))
        return [
            server_error(str(r), command=_name(c[0])) if isinstance(r, ReplyError) else r
            for r, c in zip(replies, commands, strict=True)
        ]

    async def execute_packed(self, packed: bytes) -> Any:
        """Like :meth:`execute`, for a command already packed with :func:`pack`."""
        session = self._session
        if session is None or session.broken is not None or session.idle_closed():
            session = await self._connect()
        reply = await session.request(packed)
        if isinstance(reply, ReplyError):
            return await self._after_error(packed, str(reply))
        return reply

    async def _after_error(self, packed: bytes, message: str) -> Any:
        """Raise the reply's error (:func:`~echomq._scripts.replies.server_error`); but a
        transient refusal (not run) is sent again, with backoff."""
        deadline = trio.current_time() + self.config.connect_timeout
        backoff = Backoff(0.01, 0.5)
        while is_transient(message):
            delay = backoff.next()
            if trio.current_time() + delay >= deadline:
                break
            await trio.sleep(delay)
            session = self._session
            if session is None or session.broken is not None or session.idle_closed():
                session = await self._connect()
            reply = await session.request(packed)
            if not isinstance(reply, ReplyError):
                return reply
            message = str(reply)
        raise server_error(message, command=_packed_name(packed))

    async def _connect(self) -> _Session:
        attempt = self._attempts
        async with self._lock:
            if self._closed:
                raise ConnectionLost("connection is closed")
            session = self._session
            if session is not None and session.broken is None:
                return session
            if self._attempts != attempt and self._last_failure is not None:
                # another caller tried (with backoff) while we waited: share its answer
                raise self._last_failure
            try:
                session = await self._connect_with_backoff()
            except ConnectionLost as exc:
                self._last_failure = exc
                raise
            finally:
                self._attempts += 1
            self._last_failure = None
            return session

    async def _connect_with_backoff(self) -> _Session:
        deadline = trio.current_time() + self.config.connect_timeout
        backoff = Backoff(0.02, 1.0)
        while True:
            delay = backoff.next()
            try:
                return await self._open_session()
            except ConnectionLost:  # (an OSError too) the server is not ready yet
                if trio.current_time() + delay >= deadline:
                    raise
            except (*TRANSPORT_ERRORS, trio.TooSlowError) as exc:
                if trio.current_time() + delay >= deadline:
                    raise ConnectionLost(
                        f"cannot connect to {self.config.display}: {exc!r}"
                    ) from exc
            await trio.sleep(delay)

    async def _open_session(self) -> _Session:
        stream = await open_stream(self.config)
        session = _Session(stream, self.config.display)
        await self._nursery.start(session.run)
        try:
            for command in self._handshake():
                reply = await session.request(pack_command(command))
                if isinstance(reply, ReplyError):
                    if is_transient(str(reply)):
                        raise ConnectionLost(f"{self.config.display} is not ready: {reply}")
                    raise server_error(str(reply), f"{self.config.display}: {command[0]} failed")
        except BaseException:
            session.fail(None)
            raise
        if self._session is not None:
            self.reconnects += 1
        self._session = session
        return session

    def _handshake(self) -> list[tuple[str, ...]]:
        config = self.config
        commands: list[tuple[str, ...]] = []
        if config.password is not None:
            if config.username:
                commands.append(("AUTH", config.username, config.password))
            else:
                commands.append(("AUTH", config.password))
        if config.db:
            commands.append(("SELECT", str(config.db)))
        if config.client_name:
            commands.append(("CLIENT", "SETNAME", config.client_name))
        return commands

    async def every_master(self) -> list[Connection]:
        """The connections that together hold every key: this one (a cluster answers one
        per master). For keyless reads over the whole keyspace, such as ``SCAN``."""
        await trio.lowlevel.checkpoint()
        return [self]

    def drop(self) -> None:
        """Break the current socket as if the network failed (for tests and shutdown)."""
        if self._session is not None:
            self._session.fail(None)

    async def aclose(self) -> None:
        self._closed = True
        self.drop()
        await trio.lowlevel.checkpoint()


async def probe(url: str | ConnectionConfig, **options: Any) -> None:
    """One attempt, without backoff: connect, handshake (AUTH, SELECT...), PING, close.

    For callers that run their own retry loop (a worker waiting for Redis to come up).

    Raises:
        ConnectionLost: nothing answered, or the server is not ready (``LOADING``...).
        TLSError, AuthenticationError, PermissionDenied, ServerError: as :meth:`Connection.execute`.
    """
    config = parse_url(url, **options)
    async with open_service_nursery() as nursery:
        conn = Connection(config, nursery)
        try:
            try:
                session = await conn._open_session()
            except (*TRANSPORT_ERRORS, trio.TooSlowError) as exc:
                raise ConnectionLost(f"cannot connect to {config.display}: {exc!r}") from exc
            reply = await session.request(pack_command(("PING",)))
            if isinstance(reply, ReplyError):
                if is_transient(str(reply)):
                    raise ConnectionLost(f"{config.display} is not ready: {reply}")
                raise server_error(str(reply), f"{config.display}: PING failed")
        finally:
            await conn.aclose()


@asynccontextmanager
async def open_connection(config: ConnectionConfig) -> AsyncIterator[Connection]:
    """A connection to one server (``echomq.connect`` picks this or a cluster's); no I/O
    happens until the first command."""
    async with open_service_nursery() as nursery:
        conn = Connection(config, nursery)
        try:
            yield conn
        finally:
            await conn.aclose()
