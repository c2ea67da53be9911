"""The page and its assets, served by the shared HTTP server (``echomq._http``: h11, one
request per connection, the Host check, the limits; docs/dashboard.md, "The HTTP side").

Rule 1: only GET and HEAD of a fixed set of names are served (``ASSETS``), read from the
package's ``static/`` folder.
Rule 2: every page response carries a strict Content-Security-Policy (same-origin scripts
and styles only, no framing, the websocket of this host only).
"""

from __future__ import annotations

import importlib.resources

from .._http import MAX_HEAD, BadRequest, Head, parse_head

__all__ = ["ASSETS", "BadRequest", "Head", "MAX_HEAD", "load_asset", "parse_head"]

#: URL path -> (file under static/, content type)
ASSETS: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def security_headers(connect_src: str) -> list[tuple[str, str]]:
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect_src}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return [
        ("Content-Security-Policy", csp),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ]


def load_asset(name: str) -> bytes:
    """The bytes of a file under ``static/`` (package data)."""
    return (importlib.resources.files(__package__) / "static" / name).read_bytes()
