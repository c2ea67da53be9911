"""The cyclic garbage collector's pace while workers serve in this process.

Rule 1: while at least one ``Worker.serve`` runs in the process, the collector's
young-generation threshold (``gc.get_threshold()[0]``) is at least :data:`YOUNG`; the
other two thresholds are left as they are. The first worker to start raises it (only if
it is lower), the last one to end puts the value it found back, unless someone else
changed it meanwhile (then theirs stays). The collector stays on: a cycle is still
collected, only fewer times.
Rule 2 (why): the young threshold counts tracked objects made minus freed since the last
collection (700 by default). A worker running many jobs that wait at once (each with its
coroutines, frames, cancel scopes, its ``Held`` and ``Claimed``) makes and frees thousands
of objects in a swing, and trio's sleeps and timeouts leave small cycles behind (a
``Cancelled`` and its traceback), so at 700 the collector runs every few dozen jobs, each
time walking the jobs in flight, and moves them to the older generations, whose
collections then walk them again. Above the size of that swing, it runs only for the
garbage that really grows. ``python -m benchmarks peers`` (its I/O-bound drain) and
``profile_io`` measure what this saves. The cost is bounded: at most :data:`YOUNG` more
tracked objects of cyclic garbage before a collection frees them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG", "young_threshold"]

YOUNG = 10_000  # the young generation's threshold while serving (rule 1)

_lock = threading.Lock()
_serving = 0  # workers serving now, in any thread
_found: tuple[int, int, int] | None = None  # the thresholds the first one found (raised)


@contextmanager
def young_threshold() -> Iterator[None]:
    """Rule 1 around one worker's ``serve``."""
    global _serving, _found
    with _lock:
        if _serving == 0:
            found = gc.get_threshold()
            if found[0] < YOUNG:
                _found = found
                gc.set_threshold(YOUNG, found[1], found[2])
        _serving += 1
    try:
        yield
    finally:
        with _lock:
            _serving -= 1
            if _serving == 0 and _found is not None:
                now = gc.get_threshold()
                if now == (YOUNG, _found[1], _found[2]):  # nobody else changed it meanwhile
                    gc.set_threshold(*_found)
                _found = None
