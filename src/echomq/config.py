"""Connection settings: one parser for every URL the trio wire and the sync producer accept.

Accepted forms::

    redis://[[user]:password@]host[:port][/db]
    rediss://...                       TLS; ?ssl_ca_certs=PATH&ssl_cert_reqs=none|required
                                        &ssl_certfile=PATH&ssl_keyfile=PATH
    unix:///path/to/redis.sock[?db=N&password=...&username=...]

Any form also takes ``?connect_timeout=SECONDS`` and ``?client_name=NAME``. User and
password are percent-decoded (``redis://user:p%40ss@host``).

``embedded://`` is not a connection: it is resolved by :mod:`echomq.testing` (a private
redis-server child process) before it reaches here.
"""

from __future__ import annotations

import ssl
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .errors import InvalidArgument

__all__ = ["ConnectionConfig", "parse_url", "DEFAULT_URL"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"


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

    @property
    def display(self) -> str:
        """The address without credentials, for logs and messages."""
        if self.unix_path:
            return f"unix://{self.unix_path}"
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{self.host}:{self.port}/{self.db}"

    def make_ssl_context(self) -> ssl.SSLContext:
        """The TLS context: the one given, or one built from the ssl_* settings."""
        if self.ssl_context is not None:
            return self.ssl_context
        ctx = ssl.create_default_context(cafile=self.ssl_ca_certs)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        if not self.ssl_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


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
