"""Spans of time as people write them: ``90s``, ``30m``, ``1h30m``, ``2d``, ``1w``, ``250ms``.

One parser for every surface that reads one (``echomq history --since``, ``echomq
retention --keep-result``): :func:`span_ms` answers milliseconds, or None when the text is
not a span (the caller may then try another form, an ISO date for instance).
"""

from __future__ import annotations

import re

__all__ = ["span_ms"]

_SPAN = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def span_ms(text: str) -> float | None:
    """``text`` (one or more ``<number><unit>`` parts, no spaces) in ms; None if it is not one."""
    text = text.strip()
    spans = _SPAN.findall(text)
    if not spans or "".join(n + u for n, u in spans) != text:
        return None
    return sum(float(n) * _UNIT_MS[u] for n, u in spans)
