"""Texts the worker stores for a job: bounded, encodable, and honest about what was cut.

Rule 1: a stored text (``last_error``, a traceback log line, a cancel reason) is UTF-8 and at
most a given number of bytes. Lone surrogates (``"\\udcff"``, from bytes decoded with
``surrogateescape``) are written as their escapes, so the text always encodes.
Rule 2: a cut says where and how much: ``... [truncated 12,345 chars]``. An error text keeps
its head (the type and the start of the message); a traceback keeps its head and its tail
(the outermost frames, and the innermost ones with the exception line).
Rule 3: describing an exception never raises, whatever its ``__str__`` does.
Rule 4: stored bytes (a payload, a result, a progress value written by another producer)
are shown without parsing them: UTF-8 as text, anything else with its bytes escaped
(``\\xff``), so an operator's view never fails on what it displays.
"""

from __future__ import annotations

__all__ = ["clip", "error_text", "raw_text", "safe_str", "show_bytes"]

_MARK_ROOM = 64  # bytes kept free for the marker


def _encodable(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def _mark(cut: int) -> str:
    return f"... [truncated {cut:,} chars]"


def clip(text: str, limit: int, *, tail: int = 0) -> str:
    """``text`` as valid UTF-8 of at most ``limit`` bytes; a cut is marked.

    Args:
        limit: the most bytes the answer may take (at least 128).
        tail: bytes of the end to keep as well (0: keep the head only).
    """
    text = _encodable(text)
    data = text.encode()
    if len(data) <= limit:
        return text
    tail = min(tail, (limit - _MARK_ROOM) // 2)
    head_bytes = limit - _MARK_ROOM - tail
    head = data[:head_bytes].decode("utf-8", "ignore")
    end = data[len(data) - tail :].decode("utf-8", "ignore") if tail else ""
    cut = len(text) - len(head) - len(end)
    if end:
        return f"{head}\n{_mark(cut)}\n{end}"
    return f"{head}{_mark(cut)}"


def safe_str(value: object) -> str:
    """``str(value)``, or ``<str() failed>`` when its ``__str__`` raises."""
    try:
        return str(value)
    except Exception:  # a broken __str__ must not break the failure path
        return "<str() failed>"


def error_text(exc: BaseException, limit: int | None = None) -> str:
    """``Type: message`` (or ``Type``), clipped to ``limit`` bytes when given.

    A group names its leaves: ``ExceptionGroup: 2 errors [ValueError: a; SystemExit: 3]``.
    """
    text = safe_str(exc)
    if isinstance(exc, BaseExceptionGroup):
        leaves = [error_text(e) for e in _leaves(exc)[:5]]
        text = f"{text} [{'; '.join(leaves)}]"
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if limit is None else clip(text, limit)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found += _leaves(exc)
        else:
            found.append(exc)
    return found


def raw_text(data: bytes) -> str:
    """Bytes as text: UTF-8 where it is, ``\\xNN`` escapes where it is not."""
    return data.decode("utf-8", "backslashreplace")


def show_bytes(data: bytes, limit: int) -> str:
    """Stored bytes for people, at most about ``limit`` bytes: text, or marked raw."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return f"(not UTF-8, {len(data):,} bytes) " + clip(raw_text(data), limit)
    return clip(text, limit)
