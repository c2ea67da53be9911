"""A finished job's one way out (``_worker/settle.py`` rule 1): the settler takes its
outcome, the held-job table lets it go (handing it back when it was not settled) and its
slot is freed in the room, which wakes whoever waits for one (``_worker/room.py``)."""

from __future__ import annotations

from typing import Any, cast

import pytest
import trio
import trio.testing

from echomq._worker import room as room_module
from echomq._worker.cancellation import Held, InFlight, Stop
from echomq._worker.outcome import Settlement
from echomq._worker.room import Room
from echomq._worker.settle import Settler


async def test_a_freed_slot_wakes_every_task_waiting_for_one() -> None:
    room = Room(4)
    woken: list[str] = []

    async def wait(name: str) -> None:
        await room.changed()
        woken.append(name)

    assert room.available == 4 and room.cohort == 2
    room.take(1)
    room.take(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "claim loop")
        nursery.start_soon(wait, "prefetch starter")
        await trio.testing.wait_all_tasks_blocked()
        assert woken == []
        room.free(1)
    assert sorted(woken) == ["claim loop", "prefetch starter"] and room.available == 3


def test_the_slots_turn_over_fast_while_a_cohort_frees_within_the_turnover(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = trio.testing.MockClock()
    monkeypatch.setattr(room_module, "PREFETCH_TURNOVER", 0.05)

    async def main() -> None:
        room = Room(4)  # a cohort: 2 slots
        room.free(1)
        assert not room.fast  # half a cohort: nothing measured yet
        room.free(1)
        assert room.fast  # a cohort within 0.05 s
        clock.jump(0.06)
        assert not room.fast  # not recently
        clock.jump(1.0)
        room.free(2)
        assert not room.fast  # that cohort took 1.06 s

    trio.run(main, clock=clock)


def _held(job_id: str, stop: Stop | None = None) -> Held:
    held = Held(job_id, 7, 1000)
    held.stop = stop
    return held


async def test_the_table_hands_back_what_was_not_settled_unless_recovery_or_a_fence_owns_it() -> (
    None
):
    inflight = InFlight()
    helds = [
        inflight.add("done", 1, 1000),
        inflight.add("unsettled", 2, 1000),
        inflight.add("lost", 3, 1000),
        inflight.add("fenced", 4, 1000),
    ]
    helds[2].stop, helds[3].stop = Stop.LOST, Stop.FENCED
    inflight.finish(helds, {helds[0]})
    assert len(inflight) == 0
    assert inflight.take_hand_back() == [("", "unsettled", 2)]
    assert inflight.take_hand_back() == []
    await inflight.wait_idle()  # (returns at once: nothing held)


async def test_the_settler_finishes_what_it_does_not_write_and_frees_its_slot() -> None:
    """A fenced job counts as cancelled, a lost one as lost, neither is written; a job with
    no outcome (a shutdown past grace) is handed back. Each frees its slot at once."""
    inflight, room = InFlight(), Room(3)
    async with trio.open_nursery() as nursery:
        settler = Settler(conn=cast(Any, None), inflight=inflight, room=room, nursery=nursery)
        fenced, lost, shut = (inflight.add(name, 1, 1000) for name in ("f", "l", "s"))
        for _ in range(3):
            room.take(1)
        fenced.stop, lost.stop, shut.stop = Stop.FENCED, Stop.LOST, Stop.SHUTDOWN
        result = Settlement(complete=True, result=b"1")
        assert settler.take(fenced, result) is None
        assert settler.take(lost, b"1") is None
        assert settler.take(shut, None) is None
        failure = Settlement(complete=False, error="E: x", retry_delay_ms=5)
        held = _held("x")
        assert settler.take(held, failure) is failure  # written alone, by settle()
        assert held.settling
    counters = settler.counters
    assert (counters.cancelled, counters.lost, counters.completed) == (1, 1, 0)
    assert room.available == 3 and len(inflight) == 0
    assert inflight.take_hand_back() == [("", "s", 1)]
    assert settler.batches == 0
