"""JobState and TRANSITIONS, and the state-machine page generated from them.

``python tests/model/test_states.py`` rewrites the generated blocks of
docs/state-machine.md; the test fails when the page and the table disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

from echomq._model.states import LIVE_STATES, TERMINAL_STATES, TRANSITIONS, JobState

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machine.md"
ORDER: list[JobState | None] = [None, *JobState]


def _name(state: JobState | None) -> str:
    return "(none)" if state is None else state.value


def _edges() -> dict[tuple[JobState | None, JobState | None], list[str]]:
    edges: dict[tuple[JobState | None, JobState | None], list[str]] = {}
    for script, moves in TRANSITIONS.items():
        for source, targets in moves.items():
            for target in targets:
                edges.setdefault((source, target), []).append(script)
    return edges


def render_table() -> str:
    """One row per script and target set: the states it moves a job from, and to."""
    lines = ["| script | from | to |", "|---|---|---|"]
    for script, moves in TRANSITIONS.items():
        by_targets: dict[frozenset[JobState | None], list[JobState | None]] = {}
        for source in sorted(moves, key=ORDER.index):
            by_targets.setdefault(moves[source], []).append(source)
        for targets, sources in by_targets.items():
            left = " \\| ".join(_name(s) for s in sources)
            right = " \\| ".join(_name(t) for t in sorted(targets, key=ORDER.index))
            lines.append(f"| `{script}` | {left} | {right} |")
    return "\n".join(lines)


def render_diagram() -> str:
    """Every edge, grouped by source state, labelled with the scripts that make it."""
    edges = _edges()
    lines = []
    for source in ORDER:
        outgoing = sorted((k for k in edges if k[0] == source), key=lambda k: ORDER.index(k[1]))
        if not outgoing:
            continue
        lines.append(f"{_name(source)}")
        for _, target in outgoing:
            label = ", ".join(edges[(source, target)])
            lines.append(f"  ──[{label}]──▶ {_name(target)}")
    return "\n".join(lines)


def _blocks() -> dict[str, str]:
    return {"table": render_table() + "\n", "diagram": "```\n" + render_diagram() + "\n```\n"}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated:{name} -->\n)(.*?)(<!-- end:{name} -->)", re.DOTALL)


def test_state_machine_page_shows_the_generated_table_and_diagram() -> None:
    """docs/state-machine.md's generated blocks equal what TRANSITIONS renders."""
    text = DOC.read_text(encoding="utf-8")
    for name, block in _blocks().items():
        match = _pattern(name).search(text)
        assert match, f"docs/state-machine.md lacks the generated:{name} block"
        assert match.group(2) == block, f"regenerate: python {Path(__file__).name}"


def test_states_are_stored_lowercase_and_partitioned() -> None:
    """States are the lowercase row values; terminal and live states split them."""
    assert [s.value for s in JobState] == [
        "pending",
        "scheduled",
        "active",
        "completed",
        "dead",
        "cancelled",
        "waiting",
        "expired",
    ]
    assert TERMINAL_STATES | LIVE_STATES == frozenset(JobState)
    assert not TERMINAL_STATES & LIVE_STATES


def test_terminal_states_are_left_only_by_removal_or_reprocess() -> None:
    """A completed, cancelled or dead job is only deleted, or (dead) reprocessed back to pending (a
    dead flow parent whose child is reprocessed: back to waiting, docs/flows.md; on
    another queue than the child, by the relayed `reopen`: flow_notify)."""
    for script, moves in TRANSITIONS.items():
        for source, targets in moves.items():
            if source in TERMINAL_STATES:
                allowed: set[JobState | None] = {None}
                if script == "reprocess_job":
                    allowed |= {JobState.PENDING, JobState.WAITING}
                if script == "flow_notify" and source is JobState.DEAD:
                    allowed |= {JobState.WAITING}
                assert targets <= allowed, script


def test_only_enqueue_creates_a_row() -> None:
    """(none) is a source only for enqueue and add_flow (a flow's jobs), and for the
    scripts where a job dies or expires (its error callback, enqueued there): no other
    script writes a row that did not exist."""
    makers = [s for s, moves in TRANSITIONS.items() if None in moves]
    assert makers == ["enqueue", "add_flow", "claim", "fail", "reap", "stalled_check"]


def test_every_live_state_is_reachable_and_can_finish() -> None:
    """From enqueue every state is reachable, and every live state reaches a terminal one."""
    edges = _edges()
    reachable: set[JobState | None] = {None}
    while True:
        more = {t for (s, t) in edges if s in reachable and t is not None} - reachable
        if not more:
            break
        reachable |= more
    assert reachable - {None} == set(JobState)
    for state in LIVE_STATES:
        seen, frontier = {state}, {state}
        while frontier:
            frontier = {t for (s, t) in edges if s in frontier and t is not None} - seen
            seen |= frontier
        assert seen & TERMINAL_STATES, state


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    for name, block in _blocks().items():
        text = _pattern(name).sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    DOC.write_text(text, encoding="utf-8")
