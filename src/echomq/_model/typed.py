"""A typed task's pydantic parameters and result, from its function's annotations.

Rule 1: a model travels as its JSON dump (``_model/tags.py`` rule 4). The worker turns
each argument whose parameter is annotated with a pydantic model (or a type that holds
one: ``list[Order]``, ``Order | None``...) back into it with pydantic's ``TypeAdapter``
of the annotation, before the function is called; ``handle.result()`` does the same for
the return annotation. Other parameters are passed as decoded, untouched.
Rule 2 (optional): pydantic is never imported here. An annotation can only name a model
when the task's module imported pydantic, so the check is ``sys.modules``; without it,
or when the annotations cannot be evaluated, a task has no adapters and costs nothing.
Rule 3: an argument or a result that does not validate is a
:class:`~echomq.errors.SerializationError` naming the parameter (on the worker, the job
fails with it, dead: the same payload would fail again).
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

from ..errors import SerializationError
from .codec import Call

__all__ = ["Loader"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _holds_model(hint: Any, model: type) -> bool:
    """Whether the annotation is, or holds, a pydantic model class."""
    if isinstance(hint, type) and issubclass(hint, model):
        return True
    return any(_holds_model(arg, model) for arg in typing.get_args(hint))


class Loader:
    """The adapters of one task's function (``skip_first``: its ``Job`` parameter)."""

    def __init__(self, fn: Callable[..., Any], *, skip_first: bool = False) -> None:
        #: positional parameter index -> (name, adapter); keyword name -> adapter
        self.positional: dict[int, tuple[str, Any]] = {}
        self.keywords: dict[str, Any] = {}
        self.result: Any = None
        pydantic = sys.modules.get("pydantic")
        if pydantic is None:
            return
        try:
            hints = typing.get_type_hints(fn)
            params = list(inspect.signature(fn).parameters.values())
        except Exception:  # unevaluable annotations, no signature: nothing to adapt
            return
        if skip_first:
            params = params[1:]
        model = pydantic.BaseModel
        for index, param in enumerate(params):
            hint = hints.get(param.name)
            if hint is None or not _holds_model(hint, model):
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            adapter = pydantic.TypeAdapter(hint)
            if param.kind in _POSITIONAL:
                self.positional[index] = (param.name, adapter)
            self.keywords[param.name] = adapter
        returned = hints.get("return")
        if returned is not None and _holds_model(returned, model):
            self.result = pydantic.TypeAdapter(returned)

    @property
    def active(self) -> bool:
        """Whether any parameter or the result has an adapter."""
        return bool(self.keywords) or self.result is not None

    def load_call(self, call: Call) -> Call:
        """``call`` with its model arguments validated into their models (rule 3)."""
        if not self.keywords:
            return call
        args = list(call.args)
        for index, (name, adapter) in self.positional.items():
            if index < len(args):
                args[index] = _validate(adapter, args[index], f"argument {name!r}")
        kwargs = dict(call.kwargs)
        for name, value in kwargs.items():
            adapter = self.keywords.get(name)
            if adapter is not None:
                kwargs[name] = _validate(adapter, value, f"argument {name!r}")
        return Call(task=call.task, args=tuple(args), kwargs=kwargs)

    def load_result(self, value: Any) -> Any:
        """The result, validated into its annotated model when it has one."""
        if self.result is None:
            return value
        return _validate(self.result, value, "the result")


def _validate(adapter: Any, value: Any, what: str) -> Any:
    try:
        return adapter.validate_python(value)
    except Exception as exc:  # pydantic's ValidationError (a ValueError)
        raise SerializationError(f"{what} does not fit its annotation: {exc}") from None
