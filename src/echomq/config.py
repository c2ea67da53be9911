"""Settings: where to connect (one parser for every URL the trio wire and the sync producer
accept), how a worker runs (:class:`WorkerConfig`), and the payload size limit.

Accepted forms::

    redis://[[user]:password@]host[:port][/db]
    rediss://...                       TLS; ?ssl_ca_certs=PATH&ssl_cert_reqs=none|required
                                        &ssl_certfile=PATH&ssl_keyfile=PATH
    unix:///path/to/redis.sock[?db=N&password=...&username=...]
    redis+cluster://[[user]:password@]host:port[,host:port...][/]
    rediss+cluster://...               a Redis Cluster (TLS): the nodes are seeds; the
                                        layout is read from them (docs/wire.md)

Any form also takes ``?connect_timeout=SECONDS`` and ``?client_name=NAME``. User and
password are percent-decoded (``redis://user:p%40ss@host``).

Which URL: :func:`resolve_url` is the one rule, for workers, producers and the CLI alike:
the explicit argument (``--url``, ``connect(url)``), else the queue's own
``Queue(url=...)``, else ``$ECHOMQ_URL``, else :data:`DEFAULT_URL` (docs/wire.md, "Which
URL").

``embedded://`` is not a connection: it is resolved by :mod:`echomq.testing` (a private
redis-server child process) before it reaches here.

The payload size limit lives here too (:func:`set_max_payload`): one process-wide
number that every verb checks before it writes a payload, a result or new job data.

:class:`WorkerConfig` is the one place a worker option is declared: its default, its
check, its help text and its environment variable. ``Worker(queue, config=...)`` (or the
same names as keywords), the ``echomq worker`` flags and the ``ECHOMQ_*`` variables are
all generated from its fields (docs/runtime.md, "Worker options").
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .errors import InvalidArgument, TLSError

__all__ = [
    "ConnectionConfig",
    "Recovery",
    "WorkerConfig",
    "check_bind_host",
    "parse_url",
    "resolve_bind_host",
    "resolve_url",
    "DEFAULT_URL",
    "URL_VARIABLE",
    "DEFAULT_MAX_PAYLOAD",
    "MAX_BATCH_BYTES",
    "max_payload",
    "set_max_payload",
]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
URL_VARIABLE = "ECHOMQ_URL"  # the environment's URL, below every URL given in code


def resolve_url(*given: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The URL to connect to: the first of ``given`` that is set (pass them strongest
    first: the explicit argument, then ``Queue(url=...)``), else ``$ECHOMQ_URL``, else
    :data:`DEFAULT_URL`. An empty string counts as not set.

    The one rule of every surface (a worker, a producer, ``echomq`` commands, the asyncio
    and blocking connections): a URL written in code or on a command line wins over the
    environment, and the environment over the default.
    """
    for url in given:
        if url:
            return url
    env = os.environ if environ is None else environ
    return env.get(URL_VARIABLE) or DEFAULT_URL


DEFAULT_MAX_PAYLOAD = 64 * 2**20  # bytes; well below Redis's proto-max-bulk-len (512 MiB)
_HIGHEST_MAX_PAYLOAD = 512 * 2**20  # Redis's default proto-max-bulk-len
MAX_BATCH_BYTES = 512 * 2**20  # payload bytes in one enqueue_many (client-query-buffer 1 GiB)
_max_payload = DEFAULT_MAX_PAYLOAD


def max_payload() -> int:
    """The largest payload, result or job data a verb writes, in bytes (:func:`set_max_payload`)."""
    return _max_payload


def set_max_payload(nbytes: int) -> None:
    """Set the process-wide payload size limit, in bytes (default 64 MiB, at most 512 MiB).

    Every verb that writes a payload (``enqueue``, ``enqueue_many``, ``update_data``, the
    sync producer) or a result (``complete``) raises
    :class:`~echomq.errors.PayloadTooLarge` over it, before any write. Set it where the
    queue is defined, so producers and workers importing that module agree. Keep it below
    the server's ``proto-max-bulk-len``.

    Raises:
        InvalidArgument: not an int in 1..512 MiB.
    """
    global _max_payload
    if (
        isinstance(nbytes, bool)
        or not isinstance(nbytes, int)
        or not 1 <= nbytes <= _HIGHEST_MAX_PAYLOAD
    ):
        raise InvalidArgument(
            f"max payload must be an int in 1..{_HIGHEST_MAX_PAYLOAD} bytes, not {nbytes!r}"
        )
    _max_payload = nbytes


@attrs.frozen(kw_only=True)
class ConnectionConfig:
    """Where and how to connect. Build one with :func:`parse_url`."""

    host: str = "127.0.0.1"
    port: int = 6379
    unix_path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    tls: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_verify: bool = True
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, eq=False, repr=False)
    connect_timeout: float = 5.0
    client_name: str | None = None
    cluster_nodes: tuple[tuple[str, int], ...] = ()  # seeds of a Redis Cluster; () = one node

    @property
    def cluster(self) -> bool:
        """Whether this names a Redis Cluster (``redis+cluster://``)."""
        return bool(self.cluster_nodes)

    def for_node(self, host: str, port: int) -> ConnectionConfig:
        """The same settings for one node of a cluster (a plain single-node config)."""
        return attrs.evolve(self, host=host, port=port, cluster_nodes=())

    @property
    def display(self) -> str:
        """The address without credentials, for logs and messages."""
        if self.cluster_nodes:
            scheme = "rediss+cluster" if self.tls else "redis+cluster"
            return f"{scheme}://{','.join(f'{h}:{p}' for h, p in self.cluster_nodes)}/"
        if self.unix_path:
            return f"unix://{self.unix_path}"
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{self.host}:{self.port}/{self.db}"

    def make_ssl_context(self) -> ssl.SSLContext:
        """The TLS context: the one given, or one built from the ssl_* settings.

        Raises:
            TLSError: a file the settings name is missing or unreadable, or holds no
                certificate or key it should (or a key that does not match the
                certificate): a configuration error, not an outage (never retried).
        """
        if self.ssl_context is not None:
            return self.ssl_context
        try:
            ctx = ssl.create_default_context(cafile=self.ssl_ca_certs)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise self._tls_error("ssl_ca_certs", self.ssl_ca_certs, exc) from None
        if self.ssl_certfile:
            try:
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            except (OSError, ssl.SSLError, ValueError) as exc:
                names = "ssl_certfile" + (" / ssl_keyfile" if self.ssl_keyfile else "")
                files = self.ssl_certfile + (f" / {self.ssl_keyfile}" if self.ssl_keyfile else "")
                raise self._tls_error(names, files, exc) from None
        elif self.ssl_keyfile:
            raise TLSError(
                f"TLS configuration for {self.display}: ssl_keyfile needs ssl_certfile too"
            )
        if not self.ssl_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _tls_error(self, name: str, path: str | None, exc: BaseException) -> TLSError:
        """One line: which setting, which file, and the reason (an OS error's strerror)."""
        if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
            why = exc.strerror.lower()
        else:
            why = str(exc) or type(exc).__name__
        return TLSError(f"TLS configuration for {self.display}: {name} {path!r}: {why}")


def _int(value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgument(f"{what} must be an integer, not {value!r}") from None
    if number < 0:
        raise InvalidArgument(f"{what} must not be negative, not {value!r}")
    return number


def _seconds(value: str, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise InvalidArgument(f"{what} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise InvalidArgument(f"{what} must be positive, not {value!r}")
    return number


def parse_url(url: str | ConnectionConfig, **overrides: object) -> ConnectionConfig:
    """Parse a redis URL into a :class:`ConnectionConfig` (a config passes through).

    Raises:
        InvalidArgument: the URL has an unknown scheme or a malformed part.
    """
    if isinstance(url, ConnectionConfig):
        return attrs.evolve(url, **overrides) if overrides else url  # type: ignore[arg-type]
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    fields: dict[str, object] = {}
    if parts.scheme in ("redis+cluster", "rediss+cluster"):
        return _parse_cluster_url(url, parts.scheme, query, overrides)
    if parts.scheme in ("redis", "rediss"):
        fields["tls"] = parts.scheme == "rediss"
        fields["host"] = parts.hostname or "127.0.0.1"
        try:
            port = parts.port
        except ValueError:
            raise InvalidArgument(f"bad port in {url!r}") from None
        fields["port"] = port or 6379
        path = parts.path.strip("/")
        if path:
            fields["db"] = _int(path, "db")
    elif parts.scheme == "unix":
        if not parts.path:
            raise InvalidArgument(f"unix URL needs a socket path: {url!r}")
        fields["unix_path"] = parts.path
    else:
        raise InvalidArgument(f"unsupported URL scheme {parts.scheme!r} in {url!r}")
    if parts.username:
        fields["username"] = unquote(parts.username)
    if parts.password is not None:
        fields["password"] = unquote(parts.password)
    return _finish(fields, query, overrides)


def _finish(
    fields: dict[str, object], query: dict[str, str], overrides: dict[str, object]
) -> ConnectionConfig:
    """Apply the query parameters every form shares, then ``overrides``."""
    if "db" in query:
        fields["db"] = _int(query["db"], "db")
    for name in ("username", "password", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if name in query:
            fields[name] = query[name]
    if query.get("ssl_cert_reqs", "").lower() in ("none", "cert_none", "optional"):
        fields["ssl_verify"] = False
    if "connect_timeout" in query:
        fields["connect_timeout"] = _seconds(query["connect_timeout"], "connect_timeout")
    if "client_name" in query:
        fields["client_name"] = query["client_name"]
    fields.update(overrides)
    return ConnectionConfig(**fields)  # type: ignore[arg-type]


def _seed(text: str, url: str) -> tuple[str, int]:
    """One ``host:port`` (``[::1]:port`` for IPv6) of a cluster URL; the port defaults to 6379."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise InvalidArgument(f"bad node address {text!r} in {url!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise InvalidArgument(f"empty host in {url!r}")
    port = _int(port_text, "port") if port_text else 6379
    if not 0 < port < 65536:
        raise InvalidArgument(f"bad port {port_text!r} in {url!r}")
    return host, port


def _parse_cluster_url(
    url: str, scheme: str, query: dict[str, str], overrides: dict[str, object]
) -> ConnectionConfig:
    """``redis+cluster://[user:pass@]h1:p1,h2:p2/``: the nodes are seeds for the layout."""
    rest = url.split("://", 1)[1]
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    path = rest[len(netloc) :].split("?", 1)[0].strip("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        hosts = netloc
    seeds = tuple(_seed(part.strip(), url) for part in hosts.split(",") if part.strip())
    if not seeds:
        raise InvalidArgument(f"a cluster URL names at least one host:port: {url!r}")
    if (path and path != "0") or query.get("db", "0") != "0":
        raise InvalidArgument(f"a Redis Cluster has only database 0: {url!r}")
    fields: dict[str, object] = {
        "tls": scheme == "rediss+cluster",
        "host": seeds[0][0],
        "port": seeds[0][1],
        "cluster_nodes": seeds,
    }
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            fields["username"] = unquote(user)
        if colon:
            fields["password"] = unquote(password)
    return _finish(fields, query, overrides)


# -- worker options ----------------------------------------------------------------------------

Recovery = Literal["reap", "stalled"]
RECOVERY_MODES: tuple[Recovery, ...] = ("reap", "stalled")


def _int_option(low: int, high: int) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidArgument(
                f"{attribute.name} must be an int in [{low}, {high}], not {value!r}"
            )

    return check


def _seconds_option(
    *, allow_zero: bool, allow_inf: bool = False
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        ok = (
            not isinstance(value, bool)
            and isinstance(value, int | float)
            and not math.isnan(value)
            and (allow_inf or math.isfinite(value))
            and (value >= 0 if allow_zero else value > 0)
        )
        if not ok:
            bound = ">= 0" if allow_zero else "a positive, finite number of"
            raise InvalidArgument(f"{attribute.name} must be {bound} seconds, not {value!r}")

    return check


def _recovery(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in RECOVERY_MODES:
        raise InvalidArgument(f"recovery must be 'reap' or 'stalled', not {value!r}")


_DOTTED_DIGITS = re.compile(r"[0-9.]+")


def check_bind_host(option: str, host: object) -> str:
    """An address for a server to bind (``option`` names it in the message): a host name,
    an IP address, or a wildcard (``""``, ``0.0.0.0``, ``::``). Dotted digits that are not
    an IPv4 address (``999.1.1.1``) are refused here, with no I/O: no resolver answers
    them (whether a name resolves is :func:`resolve_bind_host`'s).

    Raises:
        InvalidArgument: not a str, blank space in it, or dotted digits out of range.
    """
    if not isinstance(host, str) or any(c.isspace() for c in host):
        raise InvalidArgument(f"{option} must be a host name or address, not {host!r}")
    if host and _DOTTED_DIGITS.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise InvalidArgument(f"{option} {host!r} is not an IPv4 address") from None
    return host


def resolve_bind_host(option: str, host: str) -> None:
    """Check that ``host`` resolves to an address this machine can bind, before a server
    starts (a DNS lookup; nothing is written anywhere).

    Raises:
        InvalidArgument: the name does not resolve (one line naming ``option``).
    """
    check_bind_host(option, host)
    try:
        socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidArgument(
            f"{option} {host!r} does not resolve to an address: {reason}"
        ) from None


def _host_option(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{attribute.name} must be a host name or address, not {value!r}")
    check_bind_host(attribute.name, value)


def _to_float(value: Any) -> Any:
    """An int given for seconds becomes a float (anything else is left to the check)."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _on_off(text: str) -> bool:
    """``on``/``off`` (also true/false, yes/no, 1/0) as a bool, for a flag or a variable."""
    value = text.strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise ValueError(text)


def _bool(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{attribute.name} must be True or False, not {value!r}")


def _as_tuple(value: Any) -> Any:
    """A list or tuple given for a per-queue option becomes a tuple (else left to the check)."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _per_queue(*, none_allowed: bool) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A sequence of positive ints, one per queue (``none_allowed``: an entry may be None);
    its length is checked against the queues by ``Worker``."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, tuple) or not value:
            raise InvalidArgument(
                f"{attribute.name} must be a sequence of positive ints, one per queue, "
                f"not {value!r}"
            )
        for item in value:
            if item is None and none_allowed:
                continue
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise InvalidArgument(
                    f"{attribute.name} must be positive ints"
                    + (" or None" if none_allowed else "")
                    + f", not {item!r}"
                )

    return check


def _int_list(text: str) -> tuple[int, ...]:
    """``5,3,1`` (a flag or a variable) as ``(5, 3, 1)``."""
    return tuple(int(part) for part in text.split(","))


def _cap_list(text: str) -> tuple[int | None, ...]:
    """``10,0,5`` as ``(10, None, 5)``: 0 is no cap."""
    return tuple(int(part) or None for part in text.split(","))


def per_queue_text(value: tuple[int | None, ...]) -> str:
    """A per-queue option as its flag writes it (None: 0), for ``--processes``' children."""
    return ",".join(str(item or 0) for item in value)


def _meta(
    help: str, parse: Callable[[str], Any], choices: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The metadata the CLI and the environment read from a WorkerConfig field: ``help``,
    ``parse`` (a str from a flag or a variable to the value), ``choices`` (when closed)."""
    return {"help": help, "parse": parse, "choices": choices}


def env_name(field: str) -> str:
    """The environment variable of a WorkerConfig field: ``ECHOMQ_<FIELD>``."""
    return f"ECHOMQ_{field.upper()}"


@attrs.frozen(kw_only=True)
class WorkerConfig:
    """How a worker runs. Each field is one option, declared once: its default, its check,
    its help; ``echomq worker --<field>`` and ``$ECHOMQ_<FIELD>`` are generated from it.

    Raises:
        InvalidArgument: a bad value (before any I/O).
    """

    concurrency: int = attrs.field(
        default=64, validator=_int_option(1, 100_000), metadata=_meta("jobs held at once", int)
    )
    recovery: Recovery = attrs.field(
        default="reap",
        validator=_recovery,
        metadata=_meta(
            "how expired leases come back: reap (recovered up to max-stalled times, then "
            "dead) or stalled (dead at max-stalled stalls)",
            str,
            RECOVERY_MODES,
        ),
    )
    recovery_interval: float = attrs.field(
        default=5.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=False),
        metadata=_meta("seconds between recovery sweeps (one worker per queue sweeps)", float),
    )
    max_stalled: int = attrs.field(
        default=1,
        validator=_int_option(1, 1_000_000),
        metadata=_meta(
            "the recovery bound: stalled = dead at N stalls; reap = recovered N times", int
        ),
    )
    grace: float = attrs.field(
        default=10.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=True, allow_inf=True),
        metadata=_meta("seconds in-flight jobs get to finish at shutdown (inf: wait)", float),
    )
    settle_timeout: float = attrs.field(
        default=10.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=False),
        metadata=_meta("seconds to record one outcome (retried on a lost connection)", float),
    )
    scheduler: bool = attrs.field(
        default=True,
        validator=_bool,
        metadata=_meta(
            "run the repeat scheduler: enqueue the queue's due repeatable runs (on: every "
            "worker runs it, each run is enqueued once; off: this worker only runs jobs)",
            _on_off,
        ),
    )
    heartbeat: float = attrs.field(
        default=5.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=False),
        metadata=_meta(
            "seconds between heartbeat records (at most the lease keeper's tick; the record "
            "lives three beats; each beat also fences the cancels whose grace ran out)",
            float,
        ),
    )
    block_threshold: float = attrs.field(
        default=1.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=False, allow_inf=True),
        metadata=_meta(
            "seconds the event loop may not run before the watchdog reports it blocked "
            "(logged with the task and its stack; in the heartbeat) (inf: no watchdog)",
            float,
        ),
    )
    blocked_lease_limit: float = attrs.field(
        default=60.0,
        converter=_to_float,
        validator=_seconds_option(allow_zero=True, allow_inf=True),
        metadata=_meta(
            "seconds the watchdog keeps renewing the leases of a blocked event loop "
            "(0: never; past it they lapse and recovery hands the jobs to another worker)",
            float,
        ),
    )

    prefetch: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_int_option(0, 100_000)),
        metadata=_meta(
            "claimed jobs held beyond concurrency, waiting for a slot, while jobs finish "
            "fast (0: never; default: half the concurrency)",
            int,
        ),
    )
    weights: tuple[int, ...] | None = attrs.field(
        default=None,
        converter=_as_tuple,
        validator=_per_queue(none_allowed=False),
        metadata=_meta(
            "serve several queues by weight, one positive int per queue (5,3,1: in "
            "proportion while all have work); default: strict order, the first queue first",
            _int_list,
        ),
    )
    caps: tuple[int | None, ...] | None = attrs.field(
        default=None,
        converter=_as_tuple,
        validator=_per_queue(none_allowed=True),
        metadata=_meta(
            "the most jobs held at once per queue served, one per queue (10,0,5; 0: no "
            "cap); within concurrency",
            _cap_list,
        ),
    )
    metrics_port: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_int_option(0, 65535)),
        metadata=_meta(
            "serve Prometheus /metrics on this port (0: any free port; default: off)", int
        ),
    )
    metrics_host: str = attrs.field(
        default="127.0.0.1",
        validator=_host_option,
        metadata=_meta("the address /metrics binds (0.0.0.0: every interface)", str),
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorkerConfig:
        """The config from ``$ECHOMQ_<FIELD>`` variables (``os.environ`` by default), with
        ``overrides`` (None values ignored) winning over them; the rest defaults.

        Raises:
            InvalidArgument: a variable that does not parse, or a bad value.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in attrs.fields(cls):
            raw = env.get(env_name(field.name))
            if raw is not None and raw.strip():
                try:
                    values[field.name] = field.metadata["parse"](raw.strip())
                except ValueError:
                    raise InvalidArgument(
                        f"${env_name(field.name)}: cannot read {raw!r} as {field.name}"
                    ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
