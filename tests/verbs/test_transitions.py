"""The transition table drives a run: every verb, every state change it makes observed on
the server, each one checked against ``TRANSITIONS``, and every row of the table seen."""

from __future__ import annotations

import trio

import echomq
from _transitions import check_against_transitions, listed_moves, run_every_verb


async def test_every_observed_move_is_in_the_table_and_every_row_is_seen(
    conn: echomq.Connection, queue: str
) -> None:
    with trio.fail_after(30):
        steps = await run_every_verb(conn, queue)
    seen = check_against_transitions(steps)
    missing = {
        name: moves - seen.get(name, set())
        for name, moves in listed_moves().items()
        if moves - seen.get(name, set())
    }
    assert not missing, f"TRANSITIONS rows no verb made: {missing}"
    # and the steps that change no state ran scripts that TRANSITIONS says change none
    for step in steps:
        if not step.moves:
            continue
        assert step.scripts, f"{step.name} changed states without a script"
