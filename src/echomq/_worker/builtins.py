"""The tasks every worker runs without their being registered: ``echomq.group``.

Rule 1: a group in the middle of a chain (docs/flows.md) is one job of the built-in task
:data:`GROUP_TASK`: the parent of the step before it, and the child of the step after.
Its call carries its members as ``[fed, spec]`` pairs (``_model/errback.py``'s spec:
queue, id, options, payload); its run spawns them (a fed member is given the step
before's result first), waits for them, and answers the list of their results, which the
step after it is given. A built-in name never shadows a registered task: the queue's own
are looked up first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._model.codec import Call
from .._model.options import TaskOptions
from .context import Job

__all__ = ["BUILTINS", "GROUP_TASK", "BuiltinTask"]

GROUP_TASK = "echomq.group"


@attrs.frozen
class BuiltinTask:
    """A built-in task as the worker runs it (a ``TaskSpec``)."""

    name: str
    fn: Callable[..., Any]
    options: TaskOptions = attrs.field(factory=TaskOptions)
    wants_job: bool = True
    is_async: bool = True
    loads_models: bool = False

    def load_call(self, call: Call) -> Call:
        return call


async def _group(job: Job, members: list[list[Any]]) -> list[Any]:
    return await job._group(members)


BUILTINS: dict[str, BuiltinTask] = {GROUP_TASK: BuiltinTask(GROUP_TASK, _group)}
