"""Reading a completions entry (no I/O): required fields, optional ones, corrupt ones."""

from __future__ import annotations

import pytest

from echomq._model.completion import (
    CorruptEntry,
    FinishedJob,
    FinishState,
    entry_fields,
    parse_entry,
)


def flat(fields: dict[str, object]) -> list[bytes]:
    out: list[bytes] = []
    for name, value in fields.items():
        out.append(name.encode())
        out.append(value if isinstance(value, bytes) else str(value).encode())
    return out


FULL = {
    "id": "job-1",
    "task": "app.send",
    "state": "completed",
    "result": b'{"sent": true}',
    "token": 2,
    "failures": 1,
    "created_at": 100,
    "claimed_at": 200,
    "finished_at": 300,
}


def test_a_full_entry_reads_every_field() -> None:
    """Every known field lands on the FinishedJob; the result stays bytes."""
    job = parse_entry("q", "300-0", flat(FULL))
    assert job == FinishedJob(
        queue="q",
        id="job-1",
        token=2,
        state=FinishState.COMPLETED,
        finished_at=300,
        stream_id="300-0",
        task="app.send",
        result=b'{"sent": true}',
        failures=1,
        created_at=100,
        claimed_at=200,
    )


def test_optional_fields_may_be_absent_and_finished_at_defaults_to_the_stream_id() -> None:
    """A raw-verb entry (no task, no times): finished_at is the stream id's milliseconds."""
    job = parse_entry("q", "1700000000123-4", flat({"id": "x", "state": "dead", "token": 1}))
    assert job.task is None and job.created_at is None and job.claimed_at is None
    assert job.finished_at == 1700000000123
    assert job.state == FinishState.DEAD


def test_an_empty_time_counts_as_absent() -> None:
    """claimed_at '' (a job cancelled before any claim) is None, not an error."""
    job = parse_entry("q", "5-0", flat({**FULL, "claimed_at": "", "state": "cancelled"}))
    assert job.claimed_at is None


def test_unknown_fields_are_kept_in_extra() -> None:
    """A newer writer's fields survive, as text."""
    job = parse_entry("q", "5-0", flat({**FULL, "worker": "w-1", "group": "g"}))
    assert job.extra == {"worker": "w-1", "group": "g"}


def test_nul_characters_in_text_are_replaced() -> None:
    """Every store accepts the text (PostgreSQL refuses NUL in text and JSON)."""
    job = parse_entry(
        "q", "5-0", flat({**FULL, "state": "dead", "error": b"bad\x00x", "k": b"\x00"})
    )
    assert job.error == "bad\ufffdx" and job.extra == {"k": "\ufffd"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({k: v for k, v in FULL.items() if k != "id"}, "no id"),
        ({**FULL, "id": ""}, "no id"),
        ({k: v for k, v in FULL.items() if k != "state"}, "no state"),
        ({**FULL, "state": "finished"}, "unknown state"),
        ({k: v for k, v in FULL.items() if k != "token"}, "no token"),
        ({**FULL, "token": "two"}, "token is not an integer"),
        ({**FULL, "created_at": "yesterday"}, "created_at is not an integer"),
        ({**FULL, "finished_at": "1.5"}, "finished_at is not an integer"),
        ({**FULL, "failures": str(2**64)}, "out of range"),
    ],
)
def test_a_corrupt_entry_raises_corrupt_entry(fields: dict[str, object], message: str) -> None:
    """Missing id/state/token, an unknown state, a non-integer time: CorruptEntry."""
    with pytest.raises(CorruptEntry, match=message):
        parse_entry("q", "5-0", flat(fields))


def test_an_odd_field_list_or_a_bad_stream_id_is_corrupt() -> None:
    """Not name/value pairs; no finished_at and a stream id that is not <ms>-<seq>."""
    with pytest.raises(CorruptEntry, match="pairs"):
        parse_entry("q", "5-0", [b"id"])
    with pytest.raises(CorruptEntry, match="not a string"):
        parse_entry("q", "5-0", [b"id", 5, b"state", b"dead", b"token", b"1"])  # type: ignore[list-item]
    with pytest.raises(CorruptEntry, match="stream id"):
        parse_entry("q", "nope", flat({"id": "x", "state": "dead", "token": 1}))


def test_entry_fields_round_trips() -> None:
    """entry_fields (the tests' and benchmark's writer) reads back as the same job."""
    job = parse_entry("q", "300-0", flat({**FULL, "extra1": "v"}))
    assert parse_entry("q", "300-0", flat(dict(entry_fields(job)))) == job
