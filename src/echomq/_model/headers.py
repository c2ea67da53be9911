"""A job's headers: string metadata carried in its row, from the enqueue to the worker.

Rule 1 (one path): the row's ``headers`` field holds a JSON object of strings. It is
written by the enqueue (what ``before_enqueue`` hooks add, and the OpenTelemetry context's
carrier entries: ``traceparent``, ``tracestate``, ``baggage``) and answered by the claim
with the job, so the worker reads no more than it did; the run sees it as ``Job.headers``.
Rule 2 (strings only, bounded): names and values are ``str``; the encoded object is at
most :data:`MAX_HEADERS` bytes. A row's field that cannot be read as such an object
(written by hand) reads as no headers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..errors import InvalidArgument

__all__ = ["MAX_HEADERS", "check_headers", "decode_headers", "encode_headers"]

MAX_HEADERS = 16 * 1024  # bytes of a job's encoded headers

_EMPTY: Mapping[str, str] = {}


def check_headers(headers: Mapping[str, str]) -> None:
    """Raises InvalidArgument unless every name and value is a str (rule 2)."""
    for name, value in headers.items():
        if type(name) is not str or type(value) is not str:
            raise InvalidArgument(
                f"a job's headers are str names and values, not {name!r:.40}: {value!r:.40}"
            )


def encode_headers(headers: Mapping[str, str]) -> str | None:
    """The row's ``headers`` field for ``headers`` (None: empty, no field).

    Raises:
        InvalidArgument: a name or value that is not a str, or more than MAX_HEADERS bytes.
    """
    if not headers:
        return None
    check_headers(headers)
    text = json.dumps(headers, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > MAX_HEADERS:
        raise InvalidArgument(f"a job's headers are at most {MAX_HEADERS} bytes encoded")
    return text


def decode_headers(field: bytes | str | None) -> Mapping[str, str]:
    """The headers of a row's ``headers`` field (empty: none, or unreadable)."""
    if not field:
        return _EMPTY
    try:
        value = json.loads(field)
    except (ValueError, RecursionError):
        return _EMPTY
    if not isinstance(value, dict):
        return _EMPTY
    return {str(k): str(v) for k, v in value.items()}
