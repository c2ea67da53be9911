"""The values the verbs answer: JobInfo decoded from a row, Claimed, Sweep."""

from __future__ import annotations

import pytest

from echomq._model.job import Claimed, JobInfo, Sweep
from echomq._model.states import JobState
from echomq.errors import ScriptError
from echomq.jobs.lifecycle import _read_claim, read_job


def test_job_info_decodes_every_field() -> None:
    """Counters and times are ints, texts are str, payload and result stay bytes."""
    info = JobInfo.from_row(
        "j1",
        {
            b"state": b"completed",
            b"payload": b"\x00p",
            b"token": b"2",
            b"failures": b"1",
            b"stalled": b"0",
            b"max_attempts": b"3",
            b"priority": b"-4",
            b"last_error": b"boom",
            b"progress": b"50",
            b"result": b"R",
            b"lease_epoch": b"abc",
            b"created_at": b"10",
            b"claimed_at": b"11",
            b"finished_at": b"12",
        },
    )
    assert info.state is JobState.COMPLETED
    assert (info.token, info.failures, info.max_attempts, info.priority) == (2, 1, 3, -4)
    assert (info.last_error, info.progress, info.lease_epoch) == ("boom", "50", "abc")
    assert (info.created_at, info.claimed_at, info.finished_at, info.run_at) == (10, 11, 12, None)
    assert info.payload == b"\x00p"
    assert info.result == b"R" and not info.cancelled


def test_a_cancelled_row_reads_as_cancelled_with_its_reason() -> None:
    row = {b"state": b"cancelled", b"payload": b"", b"cancel_reason": b"user asked"}
    info = JobInfo.from_row("j", row)
    assert info.state is JobState.CANCELLED and info.cancelled
    assert (info.cancel_reason, info.result) == ("user asked", None)


def test_job_info_defaults_for_a_fresh_row() -> None:
    """Missing optional fields read as None; max_attempts defaults to 1; not cancelled."""
    info = JobInfo.from_row("j", {b"state": b"pending", b"payload": b""})
    assert (info.token, info.max_attempts, info.last_error, info.result) == (0, 1, None, None)
    assert not info.cancelled


def test_read_job_accepts_both_drivers_shapes() -> None:
    """A flat HGETALL list (trio wire) and a dict (redis-py) decode alike; empty is None."""
    flat = [b"state", b"dead", b"payload", b"x"]
    assert read_job("j", flat) == read_job("j", {b"state": b"dead", b"payload": b"x"})
    assert read_job("j", []) is None
    assert read_job("j", {}) is None


def test_read_job_refuses_a_row_without_state() -> None:
    """A hash with no state field is not a job row: ScriptError, not a KeyError."""
    with pytest.raises(ScriptError):
        read_job("j", [b"stalled", b"1"])


def test_values_are_frozen() -> None:
    """Claimed and Sweep are immutable values."""

    claimed = Claimed(id="j", payload=b"", token=1)
    with pytest.raises(AttributeError):
        claimed.token = 2  # type: ignore[misc]
    assert Sweep(recovered=["a"], dead=[]) == Sweep(recovered=["a"], dead=[])


def test_a_claim_reply_reads_as_claimed_values() -> None:
    """A claim's reply becomes the same values Claimed(...) makes: equal, hashable,
    frozen; the trailing next_due_ms is not a job."""

    reply = [b"a", b"p", 1, 0, None, None, "b", b"q", 3, 2, b"t", 40, 25]
    batch = _read_claim(reply)
    assert batch.jobs == [
        Claimed(id="a", payload=b"p", token=1),
        Claimed(id="b", payload=b"q", token=3, failures=2, headers=b"t", waited_ms=40),
    ]
    assert batch.next_due_ms == 25
    assert len({hash(j) for j in batch.jobs}) == 2
    assert repr(batch.jobs[0]) == repr(Claimed(id="a", payload=b"p", token=1))
    with pytest.raises(AttributeError):
        batch.jobs[0].token = 2  # type: ignore[misc]
    assert _read_claim([b"a", b"p", 1, 0, None, 7]).next_due_ms is None
    with pytest.raises(ScriptError):
        _read_claim([b"a", b"p", 1])
