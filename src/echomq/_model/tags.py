"""The payload types beyond JSON's, as tagged values: one table for both codecs.

Rule 1 (the tag): a value JSON has no type for travels as a reserved single-key object,
``{"__emq__": <tag>, "v": <value>}`` (the JSON codec) or as a msgpack array
``[<tag>, <value>]`` whose first item is extension type :data:`EXT` holding the tag's
name (the msgpack codec). The tags:

======================  ==========================================================
``datetime``            ``isoformat()``: naive stays naive, aware keeps its offset
``date`` / ``time``     ``isoformat()`` (a time keeps its offset when it has one)
``timedelta``           ``[days, seconds, microseconds]``
``uuid`` / ``decimal``  ``str(value)``
``bytes``               base64 text (msgpack: its own bin type, no tag)
``set`` / ``frozenset`` the items, as a list
``enum``                ``["module:qualname", member value]``
``dataclass``           ``["module:qualname", {init field: value}]``
``attrs``               ``["module:qualname", {init alias: value}]``
``dict``                ``[[key, value], ...]``: the escape of a dict that has the key
======================  ==========================================================

Rule 2 (never misread): the key ``__emq__`` is reserved in JSON objects. A plain JSON
payload (from any language) without it decodes exactly as ``json.loads`` reads it; a
user's dict that has the key is written as the ``dict`` escape, so it comes back as the
same dict. An object with the key that is not a well-formed tag (two keys, a known tag
name) is a :class:`~echomq.errors.SerializationError`, never a guess.
Rule 3 (classes, decoded safely): a class tag names ``module:qualname``. Decoding never
imports: the module must already be loaded in the decoding process (the worker imports
its tasks' modules, and those import their types), the name must lead to a class whose
own ``__module__`` and ``__qualname__`` are those, and the class must be of the tag's
kind (an ``Enum`` subclass, a dataclass, an attrs class). It is then built by its own
constructor (``cls(value)`` for an enum, ``cls(**fields)`` for the others, with only its
declared init fields): no ``__reduce__``, no ``__setstate__``, no other callable. A class
that is not found, or not of its kind, is a :class:`~echomq.errors.SerializationError`
naming it. No registration is needed: what a payload can build is what the process has
loaded and declared as data. A class defined inside a function (``<locals>``) cannot be
named, so it is refused when encoded.
Rule 4: a pydantic model is encoded as its JSON dump (``model_dump(mode="json")``),
untagged: a typed task turns it back into the model from its annotations
(``_model/typed.py``), as another language's producer would send it.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import sys
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

import attrs

from ..errors import SerializationError

__all__ = ["EXT", "KEY", "Refused", "reduce", "untag"]

#: the reserved key of a tagged value in JSON
KEY = "__emq__"
#: the msgpack extension type code of a tagged value
EXT = 69


class Refused(TypeError):
    """A value of a type no codec carries (``kind`` is its type's name)."""

    def __init__(self, kind: str, why: str = "") -> None:
        self.kind = kind
        super().__init__(f"a value of type {kind} cannot be encoded{why}")


def _name(cls: type) -> str:
    qual = cls.__qualname__
    if "<locals>" in qual:
        raise Refused(
            f"{cls.__module__}.{qual}", " (a class defined in a function cannot be named)"
        )
    return f"{cls.__module__}:{qual}"


def _model_dump(value: Any) -> Any:
    """A pydantic model's JSON dump, or ``_NOT`` (pydantic is never imported here)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    return _NOT


_NOT = object()


def reduce(value: Any, *, bin_native: bool = False) -> tuple[str | None, Any]:
    """``(tag, its value)`` for a value of a carried type (``tag`` None: ``value`` is
    carried as the plain value answered, a pydantic dump or a base type). ``bin_native``:
    bytes are the codec's own (msgpack).

    Raises:
        Refused: not a carried type.
    """
    exact = _EXACT.get(type(value))
    if exact is not None:  # the common types, by their exact type: one lookup
        return exact(value)
    if isinstance(value, enum.Enum):  # (before the base types: an IntEnum is an int)
        return "enum", [_name(type(value)), value.value]
    if isinstance(value, dt.datetime):
        return "datetime", value.isoformat()
    if isinstance(value, dt.date):
        return "date", value.isoformat()
    if isinstance(value, dt.time):
        return "time", value.isoformat()
    if isinstance(value, dt.timedelta):
        return "timedelta", [value.days, value.seconds, value.microseconds]
    if isinstance(value, UUID):
        return "uuid", str(value)
    if isinstance(value, Decimal):
        return "decimal", str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        if bin_native:
            return None, bytes(value)
        return "bytes", base64.b64encode(value).decode()
    if isinstance(value, frozenset):
        return "frozenset", list(value)
    if isinstance(value, set):
        return "set", list(value)
    kind = type(value)
    if dataclasses.is_dataclass(kind):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(kind) if f.init}
        return "dataclass", [_name(kind), fields]
    if attrs.has(kind):
        attrs_fields = attrs.fields(kind)
        return "attrs", [
            _name(kind),
            {a.alias: getattr(value, a.name) for a in attrs_fields if a.init},
        ]
    dump = _model_dump(value)
    if dump is not _NOT:
        return None, dump
    # subclasses of the base types (a msgpack codec with strict types asks about them)
    if isinstance(value, bool):
        return None, bool(value)
    if isinstance(value, str):
        return None, str(value)
    if isinstance(value, int):
        return None, int(value)
    if isinstance(value, float):
        return None, float(value)
    if isinstance(value, list | tuple):
        return None, list(value)
    if isinstance(value, dict):
        return None, dict(value)
    raise Refused(
        f"{kind.__module__}.{kind.__qualname__}"
        if kind.__module__ != "builtins"
        else kind.__qualname__
    )


_EXACT: dict[type, Callable[[Any], tuple[str | None, Any]]] = {
    dt.datetime: lambda v: ("datetime", v.isoformat()),
    dt.date: lambda v: ("date", v.isoformat()),
    UUID: lambda v: ("uuid", str(v)),
    Decimal: lambda v: ("decimal", str(v)),
}


def _bad(tag: str, value: Any, why: str) -> SerializationError:
    return SerializationError(f"tagged value {tag!r} cannot be decoded: {why} ({value!r:.80})")


def _class(path: Any, kind: str) -> type:
    """The loaded class ``path`` names, when it is of ``kind`` (rule 3)."""
    if not isinstance(path, str) or ":" not in path:
        raise SerializationError(f"a {kind} tag names no class: {path!r:.80}")
    module_name, _, qual = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        raise SerializationError(
            f"class {path} cannot be decoded: module {module_name!r} is not loaded in this "
            "process (decoding never imports; import it where the tasks are defined)"
        )
    found: Any = module
    for part in qual.split("."):  # through __dict__: no module __getattr__ (a lazy
        space = getattr(found, "__dict__", None)  # import), no descriptor, runs
        found = space.get(part) if isinstance(space, Mapping) else None
        if found is None:
            raise SerializationError(f"class {path} cannot be decoded: not found")
    ok = (
        isinstance(found, type)
        and found.__module__ == module_name
        and found.__qualname__ == qual
        and (
            (kind == "enum" and issubclass(found, enum.Enum))
            or (kind == "dataclass" and dataclasses.is_dataclass(found))
            or (kind == "attrs" and attrs.has(found))
        )
    )
    if not ok:
        raise SerializationError(f"class {path} cannot be decoded: it is not a {kind} class")
    return found  # type: ignore[no-any-return]


def _build(tag: str, value: Any) -> Any:
    if not (isinstance(value, list) and len(value) == 2):
        raise _bad(tag, value, "not [class, value]")
    cls = _class(value[0], tag)
    if tag == "enum":
        try:
            return cls(value[1])
        except Exception as exc:
            raise SerializationError(f"{value[0]}: {exc}") from None
    fields = value[1]
    if not isinstance(fields, dict):
        raise _bad(tag, value, "its fields are not a mapping")
    if tag == "dataclass":
        names = {f.name for f in dataclasses.fields(cls) if f.init}
    else:
        names = {a.alias for a in attrs.fields(cls) if a.init}
    unknown = set(fields) - names
    if unknown:
        raise SerializationError(f"class {value[0]} has no init field {sorted(unknown)!r:.120}")
    try:
        return cls(**fields)
    except Exception as exc:  # its own __init__ refused the fields
        raise SerializationError(f"class {value[0]} refused its fields: {exc}") from None


def _hashable(item: Any) -> Any:
    """A set's item as it went in: a tuple came back as a list (both codecs)."""
    if type(item) is list:
        return tuple(_hashable(x) for x in item)
    return item


def untag(tag: Any, value: Any) -> Any:
    """The value a tag stands for (``value`` already decoded, its own tags too).

    Raises:
        SerializationError: an unknown tag, a value that does not fit it, a class that
            is not found or not of its kind (rule 3).
    """
    try:
        if tag == "datetime":
            return dt.datetime.fromisoformat(value)
        if tag == "date":
            return dt.date.fromisoformat(value)
        if tag == "time":
            return dt.time.fromisoformat(value)
        if tag == "timedelta":
            days, seconds, micro = value
            return dt.timedelta(days=days, seconds=seconds, microseconds=micro)
        if tag == "uuid":
            return UUID(value)
        if tag == "decimal":
            if not isinstance(value, str):
                raise TypeError("not text")
            return Decimal(value)
        if tag == "bytes":
            return base64.b64decode(value, validate=True)
        if tag == "set":
            return {_hashable(item) for item in value}
        if tag == "frozenset":
            return frozenset(_hashable(item) for item in value)
        if tag == "dict":
            return {k: v for k, v in value}
    except SerializationError:
        raise
    except (TypeError, ValueError, InvalidOperation) as exc:
        raise _bad(tag, value, str(exc) or type(exc).__name__) from None
    if tag in ("enum", "dataclass", "attrs"):
        return _build(tag, value)
    raise SerializationError(f"unknown payload tag {tag!r:.80}")
