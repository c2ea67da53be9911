"""``echomq worker app:queue --processes N``: N worker processes under one supervisor.

Rule 1 (the children): each child is ``python -m echomq worker app:queue`` with the
supervisor's options (its ``WorkerConfig`` as ``$ECHOMQ_<FIELD>`` variables, ``--url``
when given), in a session of its own (a terminal's Ctrl-C reaches the supervisor alone,
which forwards it once), its standard input a pipe from the supervisor: when that pipe
closes (the supervisor is gone, even by ``kill -9``) the child shuts down gracefully.
Not ``process=True`` tasks (``processes.py``): those are a worker's helpers for CPU-bound
calls; these are whole workers, each with its own connections, slots and heartbeat.
Rule 2 (restarts): a child that exits while no stop was asked is logged with its exit
code (or the signal that killed it) and started again after a jittered, growing delay
(``_jitter.Backoff``, 0.5 s to 10 s). A child that lived ``HEALTHY`` seconds restarts at
the short delay again. Its held jobs come back by recovery (a stall), as for any worker
that dies.
Rule 3 (crash loop): a child that dies within ``HEALTHY`` seconds of its start
``CRASH_LOOP`` times in a row (a target that cannot be imported, a bad option) stops the
supervisor: the other children are stopped gracefully, and it exits 1.
Rule 4 (signals): SIGTERM and SIGINT are forwarded to every child, each its own graceful
shutdown (stop claiming, wait ``grace``, hand the rest back); a second one is forwarded
too and cuts the children's wait short. The supervisor waits for every child, and exits 0
when each exited 0.
Rule 5 (metrics): with ``--metrics-port P``, child ``i`` (0..N-1) serves its own
``/metrics`` on port ``P + i`` (``0``: each any free port, logged by the child); a
Prometheus scrape config lists the N targets, and sums across them as across hosts.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial

import attrs
import trio

from .._jitter import Backoff

__all__ = ["CRASH_LOOP", "HEALTHY", "SUPERVISED", "Fleet"]

log = logging.getLogger("echomq.supervisor")

HEALTHY = 10.0  # seconds a child must live for its death not to count towards a crash loop
CRASH_LOOP = 5  # early deaths in a row of one child that stop the supervisor (rule 3)
RESTART_MIN = 0.5
RESTART_MAX = 10.0
#: set in a child's environment: it watches its standard input (rule 1)
SUPERVISED = "ECHOMQ_SUPERVISED"


def describe(code: int) -> str:
    """An exit code as a log line says it (a negative one is the signal that killed it)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@attrs.define(eq=False)
class Fleet:
    """Runs ``processes`` children of ``command`` until a signal (:meth:`run`)."""

    command: Sequence[str]
    processes: int
    env: Mapping[str, str]
    metrics_port: int | None = None
    healthy: float = HEALTHY
    crash_loop: int = CRASH_LOOP
    restarts: int = 0
    crashed: bool = False  # rule 3 happened
    _stop: trio.Event = attrs.field(factory=trio.Event, init=False)
    _live: dict[int, trio.Process] = attrs.field(factory=dict, init=False)
    _signals: list[int] = attrs.field(factory=list, init=False)
    _codes: dict[int, int] = attrs.field(factory=dict, init=False)

    def _env(self, index: int) -> dict[str, str]:
        env = {**self.env, SUPERVISED: "1"}
        if self.metrics_port is not None:  # rule 5
            port = self.metrics_port + index if self.metrics_port else 0
            env["ECHOMQ_METRICS_PORT"] = str(port)
        return env

    async def run(self) -> int:
        """Start the children, keep them, forward signals; answer the exit code."""
        log.info(
            "supervisor (pid %d) starting %d worker processes: %s",
            os.getpid(),
            self.processes,
            " ".join(self.command[2:]),
        )
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward, signals)
                async with trio.open_nursery() as children:
                    for index in range(self.processes):
                        children.start_soon(self._keep, index)
                nursery.cancel_scope.cancel()
        if self.crashed:
            return 1
        failed = {i: c for i, c in self._codes.items() if c != 0}
        if failed:
            for index, code in sorted(failed.items()):
                log.error("worker process %d ended with %s", index, describe(code))
            return 1
        log.info("supervisor: every worker process stopped cleanly")
        return 0

    async def _forward(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            self._signals.append(signum)
            log.info(
                "%s: forwarding it to %d worker process(es)%s",
                name,
                len(self._live),
                "" if len(self._signals) == 1 else " (again: no grace)",
            )
            self._stop.set()
            self._send(signum)

    def _send(self, signum: int) -> None:
        for process in list(self._live.values()):
            if process.returncode is None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass

    async def _keep(self, index: int) -> None:
        """One child slot: start, wait, restart (rules 2 and 3)."""
        backoff = Backoff(RESTART_MIN, RESTART_MAX)
        early = 0
        while not self._stop.is_set():
            started = trio.current_time()
            code = await self._one(index)
            if self._stop.is_set():
                self._codes[index] = code
                return
            lived = trio.current_time() - started
            if lived >= self.healthy:
                early = 0
                backoff = Backoff(RESTART_MIN, RESTART_MAX)
            else:
                early += 1
            if early >= self.crash_loop:
                log.error(
                    "worker process %d died %d times in a row within %.0f s of its start "
                    "(last: %s); stopping the supervisor",
                    index,
                    early,
                    self.healthy,
                    describe(code),
                )
                self.crashed = True
                self._codes[index] = code
                self._stop.set()
                self._send(signal.SIGTERM)
                return
            delay = backoff.next()
            log.warning(
                "worker process %d exited with %s after %.1f s; restarting it in %.1f s",
                index,
                describe(code),
                lived,
                delay,
            )
            self.restarts += 1
            with trio.move_on_after(delay):
                await self._stop.wait()

    async def _one(self, index: int) -> int:
        """Run one child until it exits; answer its exit code."""
        async with trio.open_nursery() as nursery:
            run = partial(
                trio.run_process,
                self.command,
                env=self._env(index),
                stdin=subprocess.PIPE,
                check=False,
                start_new_session=True,
            )
            process: trio.Process = await nursery.start(run)
            self._live[index] = process
            log.info("worker process %d started (pid %d)", index, process.pid)
            if self._signals:  # a signal came while it started: it must hear it too
                for signum in self._signals:
                    process.send_signal(signum)
            try:
                return await process.wait()
            finally:
                self._live.pop(index, None)
                if process.stdin is not None:
                    await process.stdin.aclose()
