"""A task's call checked against its function's parameters, before any I/O.

Rule 1: ``task.delay(1)`` for ``async def send(to, subject)`` raises ``TypeError`` at the
call, as calling the function would, not later on the worker. The check is
``inspect.Signature.bind`` over the function's parameters (less a leading ``Job``, which
the worker passes), computed once per task.
Rule 2: the common call (positional arguments only, as many as the function takes, no
keyword-only parameter without a default) needs no bind: a count comparison answers it
(the same answer: Python's positional parameters with defaults come after those without).
The arguments are not rewritten: the worker calls the function with them as given.
Rule 3 (group keys): a group callable is called with the call's arguments bound to the
function's parameters, each by its parameter's name, as the function receives them
(:meth:`CallShape.named`: defaults filled in, ``*args`` a tuple and ``**kwargs`` a dict
under their own names). So ``group=lambda customer, **_: customer`` picks the same group
for ``send.delay("big", 1)`` and ``send.delay(customer="big", n=1)`` (docs/lanes.md).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["CallShape"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_FED = object()  # stands for a flow step's previous result, passed by the worker


class CallShape:
    """How a task's function may be called: its signature, less a leading ``Job`` when
    ``skip_first`` (None: the function has no readable signature, e.g. some builtins, and
    every call passes)."""

    def __init__(self, fn: Callable[..., Any], *, skip_first: bool = False) -> None:
        self.name = getattr(fn, "__qualname__", repr(fn))
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        self.low = 0
        self.high = math.inf
        self.plain = True  # no keyword-only parameter without a default
        if signature is not None:
            params = list(signature.parameters.values())
            if skip_first and params:
                params = params[1:]
                signature = signature.replace(parameters=params)
            positional = [p for p in params if p.kind in _POSITIONAL]
            self.low = sum(p.default is p.empty for p in positional)
            if not any(p.kind is p.VAR_POSITIONAL for p in params):
                self.high = len(positional)
            self.plain = not any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params)
        self.signature = signature

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` (the function's own message) unless the function could be
        called with ``args`` and ``kwargs``."""
        if not kwargs and self.plain and self.low <= len(args) <= self.high:
            return
        if self.signature is None:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None

    def parameter(self, index: int, *, fed: bool = False) -> str | None:
        """The name of the parameter positional argument ``index`` binds to (``*args``:
        its name with the index into it); None when the signature does not tell."""
        if self.signature is None:
            return None
        index += 1 if fed else 0
        for param in self.signature.parameters.values():
            if param.kind is param.VAR_POSITIONAL:
                return f"{param.name}[{index}]"
            if param.kind not in _POSITIONAL:
                return None
            if index == 0:
                return param.name
            index -= 1
        return None

    def named(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], *, fed: bool = False
    ) -> dict[str, Any] | None:
        """The call's arguments by parameter name, as the function receives them (rule 3):
        what a group callable is called with, as keywords. ``fed``: a flow step whose first
        argument, the previous step's result, is not known yet (it is left out). None: the
        function has no readable signature (the callable is then called as the task is).

        Raises:
            TypeError: the function does not take these arguments (as :meth:`check`).
        """
        if self.signature is None:
            return None
        try:
            bound = self.signature.bind(*((_FED, *args) if fed else args), **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        bound.apply_defaults()
        named = dict(bound.arguments)
        if fed:  # the first parameter's value is the worker's to pass
            first = next(iter(self.signature.parameters.values()))
            if first.kind is first.VAR_POSITIONAL:
                named[first.name] = named[first.name][1:]
            else:
                del named[first.name]
        return named
