"""The watchdog: the worker's heartbeat record, and "blocked" told from "dead".

Rule 1: a thread of its own, running a Trio loop of its own with its own connection
(the same wire and verbs as the worker), writes the worker's heartbeat record (one on each
queue it serves) every
``beat`` seconds (``heartbeat``, at most 0.9 of a lease keeper tick;
``admin/workers.beat``): it beats whatever the worker's loop does, so a
blocked worker still shows alive and a dead one (its process gone) stops beating: its
record expires after three beats. Each beat also runs ``cancel.fence_due``: a cancel whose
grace ran out is fenced within one beat of its deadline, whatever its holder does
(blocked, gone, or ignoring it), by any live worker of the queue.
Rule 2: the thread probes the worker's loop every ``check`` seconds
(``TrioToken.run_sync_soon``); the probe, run by that loop, notes the time. A probe
unanswered for longer than ``block_threshold`` means the loop is blocked: the thread logs
the blocking task and its stack (``sys._current_frames`` of the loop's thread) once,
beats at once with ``blocked_since`` and the task, and logs again when the loop runs again.
Rule 3: while the loop has not answered for half a lease keeper tick, the thread renews
the held leases (``extend_locks``), for at most ``blocked_lease_limit`` seconds of
silence: a blocked worker keeps its jobs that long (they run once); past it their leases
lapse and recovery hands them to another worker. Either way the fence keeps it safe: a
holder whose lease was taken over cannot settle.
Rule 4: the thread never touches the worker's trio objects: it copies the held jobs'
ids, tokens and leases (plain values; one copy of the map, atomic under the GIL) and reads
the counters (ints); it talks to Redis on its own connection.
Rule 5: an outage is not a block. The beats run in a task of their own, beside the
checks, and a probe's time is read when it is sent: a beat waiting ``_CALL_TIMEOUT`` on a
Redis that does not answer neither makes the loop's answer look late nor hides a block
that happens meanwhile. A beat that fails, or takes longer than
``SLOW_BEAT``, marks Redis unreachable (``unreachable_since``, ``stalls``; logged once,
and once when it answers again): the beats that get through say how long it lasted
(``unreachable_ms``) and how long ago it ended, for ``RECENT_OUTAGE`` seconds after, and
the readers (``echomq workers``, ``explain``, the dashboard) show "Redis unreachable", never
"blocked", for it. A loop blocked during an outage is still a block (logged; its record
says so once a beat gets through).
``block_threshold=inf`` turns the watchdog off (no probes beyond one per beat, no
renewals); the heartbeat goes on.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import logging
import math
import os
import re
import secrets
import socket
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Mapping
from types import FrameType

import trio

from .. import cancel, jobs
from .._scripts import validate as v
from .._wire.dial import connect
from .._wire.interface import RedisConnection
from ..admin import workers
from ..config import WorkerConfig
from ..errors import TRANSIENT, EchoMQError
from .cancellation import SETTLED_ELSEWHERE, InFlight

__all__ = ["Watchdog", "make_worker_id"]

log = logging.getLogger("echomq.worker")

_CALL_TIMEOUT = 2.0  # seconds one Redis call of the watchdog may take (a frozen server)
_STOP_TIMEOUT = 5.0  # seconds the worker waits for the thread at the end
_MAX_STACK = 16 * 1024  # characters of a blocked stack logged
SLOW_BEAT = 1.0  # seconds: a beat slower than this is a stall on Redis's side (rule 5)
RECENT_OUTAGE = 60.0  # seconds the records carry an outage after it ended (rule 5)

Held = tuple[str, int, int, str | None, str]  # id, token, lease ms, task name, queue


def make_worker_id() -> str:
    """``<host>-<pid>-<4 hex>``: readable, unique enough, and a valid key name."""
    host = re.sub(r"[^A-Za-z0-9._~-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


def _version() -> str:
    try:
        return importlib.metadata.version("echomq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def blocked_in(frame: FrameType | None) -> tuple[str | None, str]:
    """What a blocked trio thread runs: (the trio task's name, the stack up to the task)."""
    if frame is None:
        return None, ""
    frames: list[tuple[FrameType, int]] = []
    task = None
    for f, lineno in traceback.walk_stack(frame):
        if f.f_code.co_name == "unrolled_run" and "trio" in f.f_code.co_filename:
            task = f.f_locals.get("task")
            break
        frames.append((f, lineno))
    stack = "".join(traceback.StackSummary.extract(reversed(frames)).format())
    if len(stack) > _MAX_STACK:
        stack = "...\n" + stack[-_MAX_STACK:]
    name = getattr(task, "name", None)
    return (name if isinstance(name, str) else None), stack


class Watchdog:
    """One worker's heartbeat writer and loop watchdog (see the module rules)."""

    def __init__(
        self,
        *,
        url: str,
        queues: tuple[str, ...],
        worker_id: str,
        inflight: InFlight,
        counters: Callable[[], Mapping[str, int]],
        concurrency: int,
        claim_lease_ms: int,
        keeper_period: float,
        config: WorkerConfig,
    ) -> None:
        self.url = url
        self.queues = queues  # a record on each (a worker serving several queues)
        self.worker_id = worker_id
        self.inflight = inflight
        self.counters = counters
        self.concurrency = concurrency
        self.claim_lease_ms = claim_lease_ms
        self.keeper_period = keeper_period
        # a beat a little inside the keeper's tick: a cancel's fence is due within a tick
        self.beat = min(config.heartbeat, 0.9 * keeper_period)
        self.ttl_ms = round((3 * self.beat + 1.0) * 1000)
        self.threshold = config.block_threshold
        self.hold = config.blocked_lease_limit
        watching = math.isfinite(self.threshold)
        self.check = min(self.threshold, keeper_period, self.beat) / 2 if watching else self.beat
        self.host = socket.gethostname()
        self.version = _version()
        # what the probe leaves (rule 4): written by the worker's loop, read by the thread
        self._alive_at = time.monotonic()
        self._probe_sent: float | None = None
        self._started = time.monotonic()
        # the thread's own state
        self.blocked_since: float | None = None  # monotonic time the loop was last seen
        self.blocked_task: str | None = None
        self.blocked_job: str | None = None
        self.beats = 0
        self.blocks = 0
        self.renewals = 0
        self.fenced = 0
        self.stalls = 0  # outages seen: beats failing or slower than SLOW_BEAT (rule 5)
        self.unreachable_since: float | None = None  # monotonic: the first beat not through
        self._outage: tuple[float, float] | None = None  # the last one: (since, until)
        self._failing = False
        self._renewing = False
        self._beat_now = trio.Event()  # set by a check: beat at once (a block began or ended)
        self._renewal_running = False  # one renewal at a time (a slow Redis: no pile-up)
        self._main_token: trio.lowlevel.TrioToken | None = None
        self._main_ident: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    # -- in the worker's loop -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the thread, run until cancelled, then stop it (its record goes with it)."""
        self._main_token = trio.lowlevel.current_trio_token()
        self._main_ident = threading.get_ident()
        self._pong()
        up = threading.Event()
        thread = threading.Thread(
            target=self._thread, args=(up,), name=f"echomq watchdog {self.worker_id}", daemon=True
        )
        thread.start()
        await trio.to_thread.run_sync(up.wait)
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self._stop()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(thread.join, _STOP_TIMEOUT)

    def _pong(self) -> None:
        """The probe, run by the worker's loop: it runs."""
        self._alive_at = time.monotonic()
        self._probe_sent = None

    def _held(self) -> tuple[Held, ...]:
        """The jobs the worker holds now, as plain values (rule 4)."""
        for _ in range(3):
            try:
                found = self.inflight.held()
            except RuntimeError:  # the map changed under us: read it again
                continue
            return tuple(
                (h.id, h.token, h.lease_ms, h.task, h.queue)
                for h in found
                if h.stop not in SETTLED_ELSEWHERE and not h.settling
            )
        return ()

    def _running(self) -> tuple[str, ...]:
        """The ids of the jobs running now (not the prefetched ones waiting for a slot),
        at most ``MAX_RUNNING_LISTED``."""
        for _ in range(3):
            try:
                found = self.inflight.held()
            except RuntimeError:  # the map changed under us: read it again
                continue
            running = (
                h.id
                for h in found
                if h.stop not in SETTLED_ELSEWHERE and not h.settling and not h.waiting
            )
            return tuple(itertools.islice(running, workers.MAX_RUNNING_LISTED))
        return ()

    def _stop(self) -> None:
        token, scope = self._token, self._scope
        if token is not None and scope is not None:
            try:
                token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass

    # -- in the thread ----------------------------------------------------------------------------

    def _thread(self, up: threading.Event) -> None:
        try:
            trio.run(self._main, up)
        except BaseException:  # a bug here must not pass silently; the worker goes on
            log.exception("watchdog: stopped by an error")
        finally:
            up.set()

    async def _main(self, up: threading.Event) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with connect(self.url) as conn:
            with trio.CancelScope() as scope:
                self._scope = scope
                up.set()
                await self._watch(conn)
            with trio.move_on_after(_CALL_TIMEOUT):
                try:
                    for queue in self.queues:
                        await workers.forget(conn, queue, self.worker_id)
                except EchoMQError as exc:
                    log.warning("watchdog: could not remove the heartbeat record (%s)", exc)

    async def _watch(self, conn: RedisConnection) -> None:
        """The beats and the checks run side by side (rule 5): a beat waiting on a Redis
        that does not answer delays no probe, so a block meanwhile is still seen."""
        self._beat_now = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._beats, conn)
            await self._checks(conn, nursery)

    async def _beats(self, conn: RedisConnection) -> None:
        """A beat every ``beat`` seconds, and one at once when the loop blocks or runs again
        (``_beat_now``); one after another, never two at once."""
        while True:
            started = time.monotonic()
            await self._beat(conn, started)
            # beats keep their interval: a due fence waits at most one beat
            with trio.move_on_after(max(0.0, self.beat - (time.monotonic() - started))):
                await self._beat_now.wait()
            self._beat_now = trio.Event()

    async def _checks(self, conn: RedisConnection, nursery: trio.Nursery) -> None:
        next_renew = 0.0
        watching = math.isfinite(self.threshold)
        while True:
            now = time.monotonic()
            lag = 0.0 if self._probe_sent is None else now - self._probe_sent
            if watching and lag > self.threshold and self.blocked_since is None:
                self._on_block(now)
                self._beat_now.set()
            elif self.blocked_since is not None and lag <= self.threshold:
                self._on_run(now)
                self._beat_now.set()
            if watching and self.hold > 0 and lag > self.keeper_period / 2:
                silent = now - self._alive_at
                if silent < self.hold and now >= next_renew and not self._renewal_running:
                    self._renewal_running = True
                    nursery.start_soon(self._renew, conn, silent)
                    next_renew = now + self.keeper_period
                elif silent >= self.hold and self._renewing:
                    self._renewing = False
                    log.warning(
                        "watchdog: the event loop is still blocked after %.1f s: no longer "
                        "renewing its leases (blocked_lease_limit); recovery will hand its "
                        "jobs to another worker",
                        silent,
                    )
            elif self._renewing:
                self._renewing = False
            if self._probe_sent is None:
                self._probe(time.monotonic())
            await trio.sleep(self.check)

    def _probe(self, now: float) -> None:
        token = self._main_token
        if token is None:
            return
        self._probe_sent = now
        try:
            token.run_sync_soon(self._pong)
        except trio.RunFinishedError:
            if self._scope is not None:
                self._scope.cancel()

    def _on_block(self, now: float) -> None:
        self.blocks += 1
        self.blocked_since = self._alive_at
        ident = self._main_ident
        frame = sys._current_frames().get(ident) if ident is not None else None
        task, stack = blocked_in(frame)
        job = task[4:] if task is not None and task.startswith("job ") else None
        named = next((held[3] for held in self._held() if held[0] == job), None)
        self.blocked_job = job
        self.blocked_task = named or task or "(the event loop itself)"
        where = self.blocked_task + (f" (job {job})" if job else "")
        log.warning(
            "event loop blocked for %.1f s in task %s: nothing else runs meanwhile (a task "
            "that computes or calls blocking code without awaiting: run it in a thread or a "
            "process task). Its stack:\n%s",
            now - self.blocked_since,
            where,
            stack.rstrip() or "(unavailable)",
        )

    def _on_run(self, now: float) -> None:
        since = self.blocked_since if self.blocked_since is not None else now
        log.warning(
            "event loop ran again after %.1f s blocked in task %s", now - since, self.blocked_task
        )
        self.blocked_since = None
        self.blocked_task = self.blocked_job = None

    async def _renew(self, conn: RedisConnection, silent: float) -> None:
        """Rule 3: renew the snapshot's leases (answers are the keeper's to act on)."""
        try:
            await self._renew_held(conn, silent)
        finally:
            self._renewal_running = False

    async def _renew_held(self, conn: RedisConnection, silent: float) -> None:
        by_lease: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        held = self._held()
        for job_id, token, lease_ms, _, queue in held:
            by_lease[queue, lease_ms].append((job_id, token))
        if not by_lease:
            return
        if not self._renewing:
            self._renewing = True
            log.warning(
                "watchdog: renewing %d lease(s) while the event loop is blocked (%.1f s so "
                "far; at most %.1f s)",
                len(held),
                silent,
                self.hold,
            )
        for (queue, lease_ms), pairs in by_lease.items():
            for start in range(0, len(pairs), v.MAX_HELD):
                chunk = pairs[start : start + v.MAX_HELD]
                with trio.move_on_after(_CALL_TIMEOUT):
                    try:
                        await jobs.extend_locks(conn, queue, chunk, lease_ms)
                        self.renewals += 1
                    except EchoMQError as exc:
                        log.warning("watchdog: renewing leases failed (%s)", exc)

    def _outage_ms(self, now: float) -> tuple[int | None, int | None]:
        """Rule 5: (how long Redis has been or was unreachable, how long ago it ended: 0
        while it lasts), or (None, None): no outage lately."""
        if self.unreachable_since is not None:
            return max(0, round((now - self.unreachable_since) * 1000)), 0
        if self._outage is not None and now - self._outage[1] < RECENT_OUTAGE:
            since, until = self._outage
            return round((until - since) * 1000), max(0, round((now - until) * 1000))
        return None, None

    def _unreachable(self, started: float, why: str) -> None:
        if self.unreachable_since is not None:
            return
        self.unreachable_since = started
        self.stalls += 1
        log.warning(
            "watchdog: Redis unreachable (%s): an outage on Redis's side, not a blocked "
            "event loop; the heartbeat is retried every beat",
            why,
        )

    def _reachable(self, until: float) -> None:
        since = self.unreachable_since
        if since is None:
            return
        self.unreachable_since = None
        self._outage = (since, until)
        log.info("watchdog: Redis answered again after %.1f s; heartbeat written", until - since)

    async def _beat(self, conn: RedisConnection, now: float) -> None:
        snapshot = self._held()
        blocked_ms = None
        if self.blocked_since is not None:
            blocked_ms = max(0, round((now - self.blocked_since) * 1000))
        unreachable_ms, unreachable_ago_ms = self._outage_ms(now)
        beat = workers.WorkerBeat(
            host=self.host,
            pid=os.getpid(),
            version=self.version,
            queues=self.queues,
            concurrency=self.concurrency,
            lease_ms=self.claim_lease_ms,
            beat_ms=round(self.beat * 1000),
            held=len(snapshot),
            running=self._running(),
            counters=self.counters(),
            blocked_task=self.blocked_task if blocked_ms is not None else None,
            blocked_job=self.blocked_job if blocked_ms is not None else None,
            unreachable_ms=unreachable_ms,
            unreachable_ago_ms=unreachable_ago_ms,
        )
        up_ms = round((now - self._started) * 1000)
        started = time.monotonic()
        fenced: list[str] | None = None
        with trio.move_on_after(_CALL_TIMEOUT):
            try:
                found: list[str] = []
                for queue in self.queues:  # a record on each queue served
                    await workers.beat(
                        conn,
                        queue,
                        self.worker_id,
                        beat,
                        ttl_ms=self.ttl_ms,
                        up_ms=up_ms,
                        blocked_ms=blocked_ms,
                    )
                    found += await cancel.fence_due(conn, queue)
                self.beats += 1
                fenced = found
            except TRANSIENT as exc:
                self._unreachable(started, str(exc))
                return
            except EchoMQError as exc:  # not an outage: a refusal (an ACL...), said once
                if not self._failing:
                    log.error("watchdog: heartbeat failed (%s); retrying every beat", exc)
                self._failing = True
                return
        ended = time.monotonic()
        if fenced is None:
            self._unreachable(started, f"no answer within {_CALL_TIMEOUT:.0f} s")
            return
        if ended - started > SLOW_BEAT:
            self._unreachable(started, f"a heartbeat took {ended - started:.1f} s")
        self._reachable(ended)
        if self._failing:
            log.info("watchdog: heartbeat written again")
            self._failing = False
        if fenced:
            self.fenced += len(fenced)
            log.warning(
                "heartbeat: fenced %d cancel(s) whose grace ran out: %s",
                len(fenced),
                ", ".join(fenced),
            )
