"""Generate docs/reference.md, the API reference, from the public modules' docstrings.

    .venv/bin/python docs/gen_reference.py           # write docs/reference.md
    .venv/bin/python docs/gen_reference.py --check   # exit 1 when it is out of date

tests/test_reference.py runs the check, so the page never rots. What is public is what
each module's ``__all__`` lists; a name exported by several modules is written once, where
it is first met (``echomq`` first), and linked from the others. Why our own generator and
not pdoc: docs/design.md, "Choices where the design was open".
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import attrs

MODULES = (
    "echomq",
    "echomq.jobs",
    "echomq.admin",
    "echomq.cancel",
    "echomq.stalled",
    "echomq.events",
    "echomq.sync",
    "echomq.asyncio",
    "echomq.config",
    "echomq.errors",
    "echomq.testing",
)
OUT = Path(__file__).resolve().parent / "reference.md"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _anchor(qualified: str) -> str:
    return qualified.replace(".", "").lower()


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _ADDRESS.sub("", text)


def _is_own(cls: type, name: str) -> bool:
    return any(name in vars(base) for base in cls.__mro__ if base.__module__.startswith("echomq"))


def _members(cls: type) -> list[tuple[str, Any]]:
    found = []
    for name, value in sorted(vars(cls).items()):
        if name.startswith("_") or not _is_own(cls, name):
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            found.append((name, value))
    return found


def _class(qualified: str, cls: type) -> list[str]:
    lines = [f"### class `{qualified}`", ""]
    if issubclass(cls, enum.Enum):
        lines += [_doc(cls), "", "Members: " + ", ".join(f"`{m.name}`" for m in cls), ""]
        return lines
    if issubclass(cls, BaseException):
        bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
        lines += [f"Bases: {bases}", "", _doc(cls), ""]
        return lines
    lines += [f"```python\n{cls.__name__}{_signature(cls)}\n```", "", _doc(cls), ""]
    if attrs.has(cls):
        fields = [f for f in attrs.fields(cls) if not f.name.startswith("_") and f.init]
        if fields:
            lines += ["| field | default |", "|---|---|"]
            for f in fields:
                if f.default is attrs.NOTHING:
                    default = "required"
                elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
                    default = "(a new one)"
                else:
                    default = _ADDRESS.sub("", repr(f.default))
                lines.append(f"| `{f.name}` | `{default}` |")
            lines.append("")
    for name, member in _members(cls):
        if isinstance(member, property):
            lines += [f"- **`{name}`** (property): {_first_line(member)}"]
            continue
        kind = "async " if inspect.iscoroutinefunction(member) else ""
        lines += ["", f"#### `{kind}{cls.__name__}.{name}{_signature(member)}`", "", _doc(member)]
    lines.append("")
    return lines


def _first_line(obj: Any) -> str:
    return _doc(obj).split("\n\n", 1)[0].replace("\n", " ")


def _function(qualified: str, fn: Any) -> list[str]:
    kind = "async " if inspect.iscoroutinefunction(fn) else ""
    name = qualified.rsplit(".", 1)[-1]
    return [f"### `{kind}{name}{_signature(fn)}`", "", f"`{qualified}`", "", _doc(fn), ""]


def render() -> str:
    seen: dict[int, str] = {}
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `docs/gen_reference.py` (do not edit by hand; run",
        "`.venv/bin/python docs/gen_reference.py`). Every public name is what its module's",
        "`__all__` lists. Start with the [tutorial](tutorial.md) for how the pieces fit.",
        "",
        "Modules: " + ", ".join(f"[`{m}`](#{_anchor(m)})" for m in MODULES),
        "",
    ]
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        out += [f"## `{module_name}`", "", _doc(module).split("\n\n", 1)[0], ""]
        linked: list[str] = []
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            qualified = f"{module_name}.{name}"
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                if id(obj) not in seen and isinstance(obj, int | float | str | tuple | frozenset):
                    out += [f"- `{qualified} = {_ADDRESS.sub('', repr(obj))}`"]
                continue
            if id(obj) in seen:
                linked.append(f"[`{name}`](#{_anchor(seen[id(obj)])})")
                continue
            seen[id(obj)] = qualified
            out += ["", f'<a id="{_anchor(qualified)}"></a>', ""]
            out += _class(qualified, obj) if inspect.isclass(obj) else _function(qualified, obj)
        if linked:
            out += ["", "Also exported here: " + ", ".join(linked) + ".", ""]
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python docs/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
