"""The history panel's source: the durable archive (``echomq.archive``), read on request.

Rule 1: the dashboard reads the archive only when it was given one (``--archive URL``) and
only when a browser asks (a ``history`` request: one page, newest first); it never writes
there and never reads Redis for it. The store is opened on the first request and kept
open until the server stops; an archive that does not exist yet is answered as an error
(the archiver has not run), and tried again on the next request.
Rule 2: the jobs go to the page as plain JSON (``HistoryJob``): a result is shown as text
(bytes that are not UTF-8 escaped), every text clipped to ``PREVIEW`` bytes.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._model.text import clip, raw_text
from .messages import HistoryJob, HistoryRequest

if TYPE_CHECKING:
    from ..archive import ArchiveReader, FinishedJob

__all__ = ["ArchiveSource", "PREVIEW", "check_archive_url", "history_job"]

PREVIEW = 600  # bytes of a result, error or reason sent to the page


def check_archive_url(url: object) -> str:
    """The archive's URL, checked (its kind, no I/O): ``sqlite:///...`` or ``postgresql://``.

    Raises:
        InvalidArgument: not an archive URL.
    """
    from ..archive.store import store_kind
    from ..errors import InvalidArgument

    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"the archive must be a store URL, not {url!r}")
    store_kind(url)
    return url


def _text(value: str | bytes | None) -> str | None:
    if value is None:
        return None
    text = raw_text(value) if isinstance(value, bytes) else value
    return clip(text, PREVIEW) if len(text.encode("utf-8", "replace")) > PREVIEW else text


def history_job(job: FinishedJob) -> HistoryJob:
    """One archived run as the page shows it."""
    return HistoryJob(
        id=job.id,
        task=job.task,
        state=str(job.state),
        token=job.token,
        failures=job.failures,
        created_at_ms=job.created_at,
        claimed_at_ms=job.claimed_at,
        finished_at_ms=job.finished_at,
        result=_text(job.result),
        error=_text(job.error),
        reason=_text(job.reason),
    )


@attrs.define(eq=False)
class ArchiveSource:
    """The archive one dashboard reads; start :meth:`serve` in its nursery first."""

    url: str
    _stack: AsyncExitStack | None = None
    _reader: ArchiveReader | None = None
    _lock: trio.Lock = attrs.field(factory=trio.Lock)

    @property
    def display(self) -> str:
        from ..archive.store import display_url

        return display_url(self.url)

    async def serve(self, *, task_status: trio.TaskStatus[ArchiveSource]) -> None:
        """Hold the store (once opened) until cancelled, then close it."""
        async with AsyncExitStack() as stack:
            self._stack = stack
            task_status.started(self)
            await trio.sleep_forever()

    async def page(self, request: HistoryRequest) -> dict[str, Any]:
        """One page of ``request.queue``'s history: ``{"jobs": [...], "next": cursor}``.

        Raises:
            InvalidArgument, InvalidKey: a bad filter or cursor.
            ArchiveError: no archive there yet, a newer schema, no driver.
            StoreUnavailable: the store cannot be reached.
        """
        reader = await self._open()
        page = await reader.history(
            request.queue,
            state=request.state,
            task=request.task,
            limit=request.limit,
            before=request.before,
        )
        return {"jobs": [attrs.asdict(history_job(j)) for j in page.jobs], "next": page.next}

    async def _open(self) -> ArchiveReader:
        from ..archive import open_archive

        async with self._lock:
            if self._reader is None:
                assert self._stack is not None, "ArchiveSource.serve must run first"
                self._reader = await self._stack.enter_async_context(open_archive(self.url))
            return self._reader
