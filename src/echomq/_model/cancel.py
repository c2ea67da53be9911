"""Cooperative cancellation as plain values: the token a handler reads, and how a
cancelled job's result is written and read back.

Rule 1: a :class:`CancelToken` touches no key, no script and no set. It is a flag a
handler may read (``poll``/``check``); the worker bridges it to the job's
``trio.CancelScope`` (``_worker/cancellation.py``), so the handler stops at its next
checkpoint (except inside ``job.shielded()``). A handler that never awaits completes.
Rule 2: a cancelled run is settled by ``complete`` with the text ``cancelled:<reason>``
(:func:`cancelled_result`, at most :data:`MAX_REASON` bytes of reason), the worker's word
for it; the script stores no result: the job ends in state ``cancelled`` with the reason
in the row's ``cancel_reason`` (``JobInfo.cancel_reason``). :func:`cancelled_reason` reads
the reason back from such a text.
"""

from __future__ import annotations

import attrs

from ..errors import JobCancelled
from .states import CANCELLED_PREFIX
from .text import clip, safe_str

__all__ = ["MAX_REASON", "CancelToken", "cancelled_reason", "cancelled_result"]

MAX_REASON = 4096  # bytes of a cancel reason kept on the row


@attrs.define(eq=False)
class CancelToken:
    """One job's cancellation flag. The worker mints one per claim."""

    _cancelled: bool = attrs.field(default=False, init=False)
    _reason: str | None = attrs.field(default=None, init=False)

    def cancel(self, reason: str | None = None) -> None:
        """Mark the token cancelled; the first reason given wins."""
        if not self._cancelled:
            self._cancelled = True
            self._reason = reason

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def reason(self) -> str | None:
        return self._reason

    def poll(self) -> bool:
        """True once a cancellation was asked (non-blocking, no I/O)."""
        return self._cancelled

    def check(self) -> None:
        """Raise :class:`~echomq.errors.JobCancelled` if a cancellation was asked.

        A handler that raises it (from here or itself) completes as cancelled.
        """
        if self._cancelled:
            raise JobCancelled(self._reason)


def cancelled_reason(result: bytes | None) -> str | None:
    """The reason in a ``cancelled:<reason>`` text (None when empty)."""
    if not result:
        return None
    reason = result[len(CANCELLED_PREFIX) :].decode("utf-8", "replace")
    return reason or None


def cancelled_result(reason: object) -> bytes:
    """The text a cancelled run is settled with (a reason that is not a str becomes text)."""
    text = "" if reason is None else safe_str(reason)
    return (CANCELLED_PREFIX + clip(text, MAX_REASON)).encode()
