"""redis-py's exceptions and clients, seen as echomq's wire: one translation for the
blocking (``redis``) and the asyncio (``redis.asyncio``) drivers.

Rule 1: an error reply keeps its first word. redis-py drops the code of the replies it
knows (``NOSCRIPT``, ``ERR``, ``NOAUTH``...) and keeps it in ``status_code``; it is put
back, so ``server_error`` and the reply table read the same text as on the trio wire.
Rule 2: one echomq type per cause, as on the trio wire: a dropped or unreachable server is
:class:`~echomq.errors.ConnectionLost`, refused credentials
:class:`~echomq.errors.AuthenticationError`, an ACL refusal
:class:`~echomq.errors.PermissionDenied`, a failed handshake :class:`~echomq.errors.TLSError`,
a transient refusal (``LOADING``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``, a script's
"non local key", redis-py's exhausted redirects: ``server_errors.TRANSIENT``)
:class:`~echomq.errors.Unavailable` (``ClusterDown``), any other error reply
:class:`~echomq.errors.ServerError` (the scripts' refusals are typed one layer up, by
``scripts.evaluate``).
Rule 3: no command is replayed: every client made here has redis-py's retries off.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from ..._jitter import Backoff
from ...config import ConnectionConfig
from ...errors import (
    AuthenticationError,
    ConnectionLost,
    EchoMQError,
    InvalidArgument,
    NotACluster,
    ServerError,
    TLSError,
    Unavailable,
)
from ..server_errors import NON_LOCAL, server_error

T = TypeVar("T")

__all__ = [
    "client_options",
    "error_reply",
    "make_client",
    "redis_errors",
    "retry_transient",
    "wire_error",
]

# the codes redis-py strips, by exception class (for a redis-py without ``status_code``;
# MasterDownError before ClusterDownError, its base)
_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (redis.exceptions.NoScriptError, "NOSCRIPT"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.ExecAbortError, "EXECABORT"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.NoPermissionError, "NOPERM"),
)


def error_reply(exc: BaseException) -> str:
    """The server's error reply as it was sent: redis-py's message with its code put back."""
    message = str(exc)
    code = getattr(exc, "status_code", None)
    if not code:
        code = next((c for cls, c in _CODES if isinstance(exc, cls)), None)
    if not code and f"ERR {message}".startswith(NON_LOCAL):  # redis-py < 6 dropped the ERR
        code = "ERR"
    if code and not message.startswith(f"{code} "):
        return f"{code} {message}"
    return message


def _ssl_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under a redis-py ConnectionError, unless the peer just hung up."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            transient = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
            return None if isinstance(cause, transient) else cause
        cause = cause.__cause__ or cause.__context__
    return None


def _auth_error(exc: BaseException) -> AuthenticationError:
    message = error_reply(exc)
    if message.startswith("Authentication required"):  # a redis-py without status_code
        message = f"NOAUTH {message}"
    elif message.startswith("invalid username-password"):
        message = f"WRONGPASS {message}"
    error = server_error(message)
    return error if isinstance(error, AuthenticationError) else AuthenticationError(message)


def wire_error(exc: BaseException) -> EchoMQError | None:
    """The echomq error for a redis-py exception (None: not redis-py's)."""
    e = redis.exceptions
    if isinstance(exc, e.AuthenticationError):  # WRONGPASS, NOAUTH (a ConnectionError)
        return _auth_error(exc)
    # a reply: LOADING is a ConnectionError to redis-py; TRYAGAIN, CLUSTERDOWN, MASTERDOWN,
    # "non local key" are Unavailable (ClusterDown) as on the trio wire (server_errors.TRANSIENT)
    if isinstance(exc, e.ResponseError | e.BusyLoadingError):
        return server_error(error_reply(exc))
    if isinstance(exc, e.ConnectionError | e.TimeoutError):
        tls = _ssl_failure(exc)
        if tls is not None:
            return TLSError(f"TLS handshake failed: {tls}")
        return ConnectionLost(str(exc) or type(exc).__name__)
    if isinstance(exc, e.ClusterError):
        # "TTL exhausted": redis-py followed 16 redirects or TRYAGAIN replies, none ran
        return Unavailable(f"TRYAGAIN {exc} (redis-py's redirects and retries)")
    if isinstance(exc, e.RedisClusterException):  # the layout could not be read
        if "cluster mode is not enabled" in str(exc).lower():
            return NotACluster(str(exc))
        return ConnectionLost(str(exc))
    if isinstance(exc, e.RedisError):
        return ServerError(str(exc))
    return None


@contextmanager
def redis_errors() -> Iterator[None]:
    """Raise redis-py's exceptions as echomq's wire errors (rule 2)."""
    try:
        yield
    # (RedisClusterException, the layout could not be read, is no RedisError)
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
        error = wire_error(exc)
        assert error is not None
        if isinstance(error, ConnectionLost | TLSError):
            raise error from exc
        raise error from None


def client_options(config: ConnectionConfig) -> dict[str, Any]:
    """The keyword arguments redis-py's clients and connections (blocking and asyncio
    alike) take for ``config``: credentials, timeouts, TLS, RESP2, no retries.

    Raises:
        InvalidArgument: an ``ssl_context`` object, which redis-py cannot take (use the
            ``ssl_*`` URL parameters).
        TLSError: the ``ssl_*`` files are unusable (as on the trio wire, before any I/O).
    """
    if config.ssl_context is not None:
        raise InvalidArgument("redis-py cannot use an ssl_context; use the ssl_* settings")
    if config.tls and not config.unix_path:
        config.make_ssl_context()  # a missing or bad file is a TLSError, not an outage
    options: dict[str, Any] = {
        "username": config.username,
        "password": config.password,
        "socket_connect_timeout": config.connect_timeout,
        "client_name": config.client_name,
        "protocol": 2,
    }
    if config.tls:
        options.update(
            ssl=True,
            ssl_ca_certs=config.ssl_ca_certs,
            ssl_certfile=config.ssl_certfile,
            ssl_keyfile=config.ssl_keyfile,
            ssl_cert_reqs="required" if config.ssl_verify else "none",
            ssl_check_hostname=config.ssl_verify,
        )
    return options


def make_client(config: ConnectionConfig) -> redis.Redis | RedisCluster:
    """A blocking redis-py client for ``config`` (host/port or unix socket, db, ACL user,
    TLS); ``RedisCluster`` for a ``redis+cluster://`` config (it reads the layout at once).

    RESP2 (as the trio wire speaks) and no retries (scripts are not idempotent); a cluster
    client follows MOVED/ASK itself and, with no retries, never re-sends a command whose
    connection dropped.

    Raises:
        InvalidArgument: an ``ssl_context`` object (use the ``ssl_*`` URL parameters).
    """
    options = client_options(config)
    options["retry"] = Retry(NoBackoff(), 0)
    if config.unix_path:
        for name in [k for k in options if k.startswith("ssl")]:
            del options[name]
        return redis.Redis(unix_socket_path=config.unix_path, db=config.db, **options)
    if config.cluster:
        nodes = [ClusterNode(host, port) for host, port in config.cluster_nodes]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, **options)
    return redis.Redis(host=config.host, port=config.port, db=config.db, **options)


def retry_transient(
    call: Callable[[], T],
    retry_for: float,
    errors: Callable[[], AbstractContextManager[None]] = redis_errors,
) -> T:
    """``call()`` inside ``errors()``, sent again with backoff while it raises
    ``Unavailable`` (not run: ``LOADING``, ``TRYAGAIN``, "non local key"...) and
    ``retry_for`` seconds (``connect_timeout``) have not passed, as the trio wire does.
    ``ConnectionLost`` is never retried (the command may have run)."""
    deadline = time.monotonic() + retry_for
    backoff = Backoff(0.01, 0.5)
    while True:
        try:
            with errors():
                return call()
        except Unavailable:
            delay = backoff.next()
            if time.monotonic() + delay >= deadline:
                raise
            time.sleep(delay)
