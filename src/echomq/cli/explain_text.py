"""The English of ``explain``: an :class:`~echomq.jobs.Explanation` (data, read in one
atomic script) worded for people.

Rule 1: this is the one place that words a job's situation. ``echomq explain`` prints
:func:`summary` and :func:`facts`; another surface (a dashboard panel) calls the same
functions rather than phrasing it again.
Rule 2: durations read as people say them (``850 ms``, ``4.2 s``, ``3 min 5 s``); times
are the server's clock, printed in UTC.
Rule 3: an active job's holder is read from its heartbeat record (docs/runtime.md,
"Workers"): alive and running it, alive but its event loop blocked (in which task, for how
long), or gone (no heartbeat for so long: the process died or lost Redis). Only an active
job has a holder: for a waiting or dead one the row's worker is the one that claimed it
last (a completed or cancelled row keeps none: docs/results.md, "The finished row"); a
finished job says when it finished and how.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from .._model.states import TERMINAL_STATES, JobState
from .._model.steps import StepRecord
from ..admin.workers import WorkerRecord
from ..jobs.rows import Explanation, LaneFacts, OpenChild, RateWindow

__all__ = [
    "facts",
    "finished_text",
    "holder",
    "last_claimed_by",
    "lane_text",
    "open_child_text",
    "parent_text",
    "rate_text",
    "repeat_facts",
    "span",
    "summary",
    "utc",
    "when",
]


def span(ms: int) -> str:
    """A duration for people: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def utc(ms: int) -> str:
    """Server-clock milliseconds as a UTC time, to the millisecond."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _leases(ms: int, lease_ms: int | None) -> str:
    if not lease_ms:
        return span(ms)
    leases = ms / lease_ms
    return f"{leases:.0f} leases, {span(ms)}" if leases >= 2 else span(ms)


def holder(w: WorkerRecord, now_ms: int, lease_ms: int | None = None) -> str:
    """The holder in words: running it, alive but blocked, or gone."""
    if not w.alive:
        return f"worker {w.id} is gone (no heartbeat for {_leases(w.silent_ms(now_ms), lease_ms)})"
    if w.blocked_since_ms is not None:
        task = w.blocked_task or "an unknown task"
        return (
            f"worker {w.id} is alive but its event loop has been blocked for "
            f"{span(now_ms - w.blocked_since_ms)} in task {task}"
        )
    where = f" ({w.host}, pid {w.pid})" if w.host and w.pid is not None else ""
    outage = ""
    if w.unreachable_ms is not None and w.unreachable_until_ms is not None:
        ago = span(max(0, now_ms - w.unreachable_until_ms))
        outage = f" (Redis was unreachable from it for {span(w.unreachable_ms)}, {ago} ago)"
    return f"worker {w.id}{where} is running it{outage}"


def last_claimed_by(w: WorkerRecord) -> str:
    """The worker that claimed a job that is not active now (it holds nothing of it)."""
    where = f" ({w.host}, pid {w.pid})" if w.host and w.pid is not None else ""
    return f"worker {w.id}{where}" + ("" if w.alive else ", whose heartbeat has stopped")


def finished_text(e: Explanation) -> str | None:
    """When and how a dead, completed, cancelled or expired job finished, or None for any
    other."""
    job = e.job
    if job.state not in TERMINAL_STATES:
        return None
    at = (
        f"{utc(job.finished_at)} ({span(e.now_ms - job.finished_at)} ago)"
        if job.finished_at is not None
        else "at an unknown time"
    )
    if job.state is JobState.DEAD:
        return f"{at}: dead" + ("" if job.last_error else " (no error recorded)")
    if job.state is JobState.EXPIRED:
        return f"{at}: expired (not started by its deadline)"
    if job.cancelled:
        return f"{at}: cancelled ({job.cancel_reason or 'no reason given'})"
    return f"{at}: completed"


def _cancel_note(e: Explanation) -> str:
    job = e.job
    if job.cancel_requested_at is None:
        return ""
    note = f"; cancel requested {span(e.now_ms - job.cancel_requested_at)} ago"
    if job.cancel_deadline is not None:
        left = job.cancel_deadline - e.now_ms
        note += f", fenced in {span(left)}" if left > 0 else f", fence due {span(left)} ago"
    return note


def rate_text(rate: RateWindow) -> str:
    """``100 per 1.0 s``: a rate limit for people."""
    return f"{rate.max_jobs} per {span(rate.period_ms)}"


def lane_text(lane: LaneFacts, now_ms: int) -> str | None:
    """Why a grouped job's group starts nothing now, or None when it may (docs/lanes.md)."""
    if lane.at_limit:
        return f"group {lane.group} at its limit of {lane.limit} active"
    if lane.limited_until_ms is not None and lane.limited_until_ms > now_ms and lane.rate:
        return (
            f"group {lane.group} at its rate limit of {rate_text(lane.rate)} "
            f"(reopens in {span(lane.limited_until_ms - now_ms)})"
        )
    return None


def queue_text(e: Explanation) -> str | None:
    """Why the queue claims nothing now, or None (docs/lanes.md): a back-off, its cap, its
    rate window."""
    if e.blocked_until_ms is not None and e.blocked_until_ms > e.now_ms:
        return (
            "the queue backs off (a task raised RateLimited; "
            f"reopens in {span(e.blocked_until_ms - e.now_ms)})"
        )
    if e.concurrency is not None and e.running >= e.concurrency:
        return (
            f"the queue at its concurrency of {e.concurrency} "
            f"({e.running} running across its workers)"
        )
    if e.queue_rate is not None and e.queue_rate.full and e.queue_rate.reopens_in_ms:
        return (
            f"the queue at its rate limit of {rate_text(e.queue_rate)} "
            f"(reopens in {span(e.queue_rate.reopens_in_ms)})"
        )
    return None


def _pending_grouped(e: Explanation, lane: LaneFacts, gate: str) -> str:
    if lane.position is None:
        return f"pending by its row, but not in group {lane.group}'s lane: it cannot be claimed"
    where = f"position {lane.position + 1} of {lane.waiting} in group {lane.group}'s lane"
    if e.paused:
        return f"waiting at {where}{gate}"
    held = lane_text(lane, e.now_ms) or queue_text(e)
    if held is not None:
        return f"waiting: {held}; {where}"
    return f"ready at {where}: the group's turns in the round robin claim it in that order"


def open_child_text(child: OpenChild) -> str:
    """A child a flow parent waits for; one on another queue with its state read there."""
    if not child.remote:
        return child.id
    if child.state is None:
        return f"{child.id} (on {child.queue}: no row there)"
    if child.finished:
        return (
            f"{child.id} (on {child.queue}: {child.state}; its outcome is on its way "
            f"through {child.queue}'s outbox)"
        )
    return f"{child.id} (on {child.queue}: {child.state})"


def parent_text(e: Explanation) -> str | None:
    """A flow child's parent: its id, and its queue when that is another one."""
    if e.parent is None:
        return None
    if e.parent_queue is None:
        return e.parent
    return f"{e.parent} on queue {e.parent_queue} (told through this queue's outbox)"


def summary(e: Explanation) -> str:
    """One line for people: what the job is doing and what would change that."""
    job, state = e.job, e.job.state
    gate = " - the queue is paused: nothing is claimed until resume" if e.paused else ""
    if state is JobState.WAITING:
        named = [open_child_text(c) for c in e.waiting_for] or list(e.open_ids)
        ids = ", ".join(named) + (", ..." if e.open_children > len(named) else "")
        pages = (
            " (held: pages of the flow are still being added; if they stopped coming, "
            "`echomq flows QUEUE --held` lists the held roots)"
            if e.held
            else ""
        )
        return (
            f"a flow parent waiting for {e.open_children} of {e.children} children"
            f"{': ' + ids if ids else ''}{pages}; it becomes pending when they finished"
        )
    if state is JobState.PENDING and e.lane is not None:
        return _pending_grouped(e, e.lane, gate)
    if state is JobState.PENDING:
        if e.position is None:
            return "pending by its row, but in no pending set: it cannot be claimed"
        where = f"position {e.position + 1} of {e.pending_count} in pending"
        if e.paused:
            return f"waiting at {where}{gate}"
        held = queue_text(e)
        if held is not None:
            return f"waiting: {held}; {where}"
        return f"ready at {where}: the next free worker claims it in that order"
    if state is JobState.SCHEDULED:
        if e.run_at_ms is None:
            return "scheduled by its row, but in no schedule set: it cannot run"
        why = (
            f"a retry after failure {job.failures} of {job.max_attempts}"
            if job.failures
            else "delayed"
        )
        due = e.run_at_ms - e.now_ms
        if due > 0:
            return f"{why}: runs in {span(due)} (at {utc(e.run_at_ms)}){gate}"
        return f"{why}: due {span(due)} ago, promoted to pending at the next claim{gate}"
    if state is JobState.ACTIVE:
        left = e.lease_remaining_ms
        if left is None:
            return "active by its row, but in no active set: no lease holds it"
        if e.epoch_current is False or job.lease_epoch is None:
            return (
                f"claimed before the server's last restart (token {e.token}; on a cluster, "
                "or before a failover or a move of its slot): unless its holder renews it, "
                "the next recovery sweep returns it to pending without counting a stall"
            )
        w = e.holder
        lease_ms = w.lease_ms if w is not None else None
        cancel = _cancel_note(e)
        if left > 0:
            lease = f"held with token {e.token}, lease ends in {span(left)}"
            if w is None:
                return f"running: {lease} (stalls so far {job.stalled}){cancel}"
            return f"{holder(w, e.now_ms, lease_ms)}: {lease}{cancel}"
        recovery = (
            f"the next recovery sweep counts a stall (so far {job.stalled}) and returns it, "
            "or dead-letters it past the bound"
        )
        if w is None:
            return (
                f"lease expired {span(left)} ago: its holder stopped checkpointing (crashed "
                f"or stuck); {recovery}{cancel}"
            )
        if w.alive and w.blocked_since_ms is None:
            why = f"worker {w.id} is alive but stopped renewing it"
        else:
            why = holder(w, e.now_ms, lease_ms)
        return f"lease expired {span(left)} ago: {why}; {recovery}{cancel}"
    finished = f" {span(e.now_ms - job.finished_at)} ago" if job.finished_at is not None else ""
    if state is JobState.DEAD:
        if job.last_error == "stalled":
            return (
                f"dead{finished}: its lease lapsed {job.stalled} time(s); reprocess runs it again"
            )
        return (
            f"dead{finished} after {job.failures} failure(s) of {job.max_attempts} allowed: "
            f"{job.last_error}; reprocess runs it again"
        )
    if state is JobState.EXPIRED:
        deadline = f" (its deadline {utc(job.expires_at)})" if job.expires_at is not None else ""
        return (
            f"expired{finished}: not started by its deadline{deadline}; it never ran, nor will it"
        )
    if job.cancelled:
        how = (
            " (fenced: it did not stop within its cancel grace)"
            if job.cancel_fenced_at is not None
            else ""
        )
        reason = job.cancel_reason or ""
        return f"cancelled{finished}{how}: {reason}; it will not run again"
    return f"completed{finished}; it will not run again"


def facts(e: Explanation) -> list[tuple[str, str]]:
    """Labelled facts for a table: state, lease, token, counters, gate, position..."""
    job = e.job
    out = [("state", str(job.state)), ("in sets", ", ".join(e.sets) or "(none)")]
    if not e.consistent:
        out.append(("inconsistent", f"state {job.state} expects the {e.expected_set} set"))
    out.append(("queue", "paused" if e.paused else "running"))
    if e.position is not None:
        out.append(("position", f"{e.position + 1} of {e.pending_count}"))
    parent = parent_text(e)
    if parent is not None:
        out.append(("flow parent", parent))
    if e.children:
        out.append(
            ("flow children", f"{e.open_children} open of {e.children}, {e.failed_children} failed")
        )
    if e.lane is not None:
        lane = e.lane
        out.append(("group", lane.group))
        if lane.position is not None:
            out.append(("lane position", f"{lane.position + 1} of {lane.waiting}"))
        limit = "no limit" if lane.limit is None else f"limit {lane.limit}"
        out.append(("group active", f"{lane.active} ({limit})"))
        turn = "has a turn in the round robin" if lane.in_ring else "no turn now"
        out.append(("group turn", lane_text(lane, e.now_ms) or turn))
        if lane.rate is not None:
            out.append(("group rate", f"{rate_text(lane.rate)}, {lane.rate.used} started"))
    if e.queue_rate is not None:
        out.append(("queue rate", f"{rate_text(e.queue_rate)}, {e.queue_rate.used} started"))
    if e.concurrency is not None:
        out.append(("queue cap", f"{e.concurrency} running at once, {e.running} running now"))
    if e.blocked_until_ms is not None and e.blocked_until_ms > e.now_ms:
        out.append(("backs off", f"for {span(e.blocked_until_ms - e.now_ms)} (RateLimited)"))
    if e.lease_deadline_ms is not None:
        left = e.lease_deadline_ms - e.now_ms
        when = f"in {span(left)}" if left > 0 else f"expired {span(left)} ago"
        out.append(("lease deadline", f"{utc(e.lease_deadline_ms)} ({when})"))
    if job.lease_epoch is not None:
        current = "current run" if e.epoch_current else "another server run"
        out.append(("lease epoch", f"{job.lease_epoch} ({current})"))
    if job.expires_at is not None:
        left = job.expires_at - e.now_ms
        if job.state is JobState.EXPIRED:
            deadline = f"{utc(job.expires_at)} (passed before it started)"
        elif left > 0:
            deadline = f"{utc(job.expires_at)} (in {span(left)}: not started by then, it expires)"
        elif job.state in (JobState.PENDING, JobState.SCHEDULED):
            deadline = f"{utc(job.expires_at)} ({span(left)} ago: the next claim expires it)"
        else:
            deadline = f"{utc(job.expires_at)} ({span(left)} ago)"
        out.append(("expires", deadline))
    finished = finished_text(e)
    if finished is not None:
        out.append(("finished", finished))
    if e.holder is not None and job.state is JobState.ACTIVE:
        out.append(("holder", holder(e.holder, e.now_ms, e.holder.lease_ms)))
    elif e.holder is not None:
        out.append(("last claimed by", last_claimed_by(e.holder)))
    if job.cancel_requested_at is not None:
        when = f"requested {utc(job.cancel_requested_at)}"
        if job.cancel_fenced_at is not None:
            when += f", fenced {utc(job.cancel_fenced_at)}"
        elif job.cancel_deadline is not None:
            when += f", fence at {utc(job.cancel_deadline)}"
        out.append(("cancel", when))
    out.append(("token", str(e.token)))
    out.append(("failures", f"{job.failures} of {job.max_attempts}"))
    out.append(("stalls", str(job.stalled)))
    if e.run_at_ms is not None:
        due = e.run_at_ms - e.now_ms
        when = f"in {span(due)}" if due > 0 else f"due {span(due)} ago"
        out.append(("next run", f"{utc(e.run_at_ms)} ({when})"))
    if job.last_error is not None:
        out.append(("last error", job.last_error))
    if job.progress is not None:
        out.append(("progress", job.progress))
    if e.locked:
        out.append(("lock", "operator lock set: remove refuses it"))
    out += repeat_facts(e)
    out += [("step", line) for line in step_lines(e.steps)]
    out.append(("server run id", e.run_id))
    return out


def step_lines(steps: Iterable[StepRecord]) -> list[str]:
    """One line per durable step: name, state, run time, the run (token) that wrote it."""
    lines = []
    for r in steps:
        if r.state == "sleep":
            what = f"slept until {utc(r.until_ms) if r.until_ms is not None else '?'}"
        elif r.state == "failed":
            what = f"failed in {r.ms:g} ms: {r.error}"
        else:
            what = f"done in {r.ms:g} ms"
        lines.append(f"{r.name}: {what} (token {r.token})")
    return lines


def when(ms: int, now_ms: int) -> str:
    """A server-clock time and how far it is: ``2025-... (in 4.2 s)`` / ``(3 s ago)``."""
    delta = ms - now_ms
    return f"{utc(ms)} ({'in ' + span(delta) if delta >= 0 else span(delta) + ' ago'})"


def repeat_facts(e: Explanation) -> list[tuple[str, str]]:
    """For a repeatable's run: which repeatable, its schedule and its upcoming runs."""
    key = e.job.repeat
    if key is None:
        return []
    slot = e.job.id.rpartition("~")[2]
    out = [
        ("repeat", f"run of {key!r} for its slot at {utc(int(slot)) if slot.isdigit() else '?'}")
    ]
    info = e.repeat
    if info is None:
        out.append(("repeatable", "no longer registered (removed, or another echomq's record)"))
        return out
    out.append(("schedule", info.schedule.describe()))
    if info.paused:
        out.append(("upcoming runs", "none: the repeatable is paused"))
    else:
        upcoming = info.upcoming(3)
        out.append(("upcoming runs", "; ".join(when(ms, e.now_ms) for ms in upcoming)))
    return out
