"""Reading the Lua: the scripts under ``lua/``, their includes, their sha1, and the values
Python reads out of them.

Rule 1: one file per transition, named after its verb (``lua/<name>.lua``); its sha1 is
computed here, of the source as it runs (includes expanded), so the first call is an
EVALSHA.
Rule 2: a helper several scripts share is written once, in ``lua/include/<name>.lua``. A
script or an include names what it uses itself with ``-- @include <name>`` lines (an
include's at its top, after its comment). Each include is pulled in once per script, after
every include it names (depth first, in the order of the lines): a script's line is
replaced by the includes it brings that are not in yet, each between
``-- @begin include x`` / ``-- @end include x`` lines; an include's own lines go. An
include that names itself through others, or a name with no file, is refused at import.
Rule 3: every script that publishes has a sharded twin (``Script.sharded``), the same source
with ``redis.call('PUBLISH'`` spelled ``redis.call('SPUBLISH'``, with its own sha. On a
Redis Cluster the twin runs, so events go to the queue's own shard; on one server the
script runs byte for byte as written.
Rule 4: a value the scripts and Python share is written once, in the Lua, and read here at
import (:func:`include_constant`, :func:`lua_names`): the layout's version
(``include/schema.lua``), a repeat record's (``include/repeat.lua``), the order of an
enqueue option set's fields (``enqueue.lua``). The caps and the retention defaults are read
the same way by ``_model`` (``_model/caps.lua_constants``), which imports nothing of this
package.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from importlib import resources

import attrs

from .._model.caps import lua_constants

__all__ = [
    "ENQUEUE_SET_FIELDS",
    "INCLUDES",
    "REPEAT_FORMAT",
    "SCHEMA_VERSION",
    "SCRIPTS",
    "Script",
    "expand_includes",
    "include_constant",
    "include_lines",
    "lua_names",
    "make_script",
    "sharded_source",
]


@attrs.frozen
class Script:
    """One Lua transition: its name (the file's stem), source (includes expanded) and sha1.

    ``uses``: the includes its own lines name; ``includes``: every include its source holds,
    in the order they come (``uses`` and what they include).
    """

    name: str
    source: str = attrs.field(repr=False)
    sha: str
    sharded: Script | None = attrs.field(default=None, repr=False, eq=False)
    includes: tuple[str, ...] = attrs.field(default=(), eq=False)
    uses: tuple[str, ...] = attrs.field(default=(), eq=False)

    def variant(self, sharded: bool) -> Script:
        """The script to run: the sharded twin on a cluster (when it publishes), else self."""
        return self.sharded if sharded and self.sharded is not None else self


_PUBLISH = re.compile(r"""redis\.call\((\s*)(['"])PUBLISH\2""")
_NUMSUB = re.compile(r"""(['"])PUBSUB\1,(\s*)\1NUMSUB\1""")


def sharded_source(source: str) -> str:
    """``source`` with every ``redis.call('PUBLISH', ...)`` turned into ``SPUBLISH``, and
    ``'PUBSUB', 'NUMSUB'`` (who listens: include/events.lua) into ``SHARDNUMSUB``."""
    source = _NUMSUB.sub(lambda m: f"{m[1]}PUBSUB{m[1]},{m[2]}{m[1]}SHARDNUMSUB{m[1]}", source)
    return _PUBLISH.sub(lambda m: f"redis.call({m[1]}{m[2]}SPUBLISH{m[2]}", source)


_INCLUDE = re.compile(r"^-- @include (\w+)[ \t]*$", re.MULTILINE)
_INCLUDE_LINE = re.compile(r"^-- @include \w+[ \t]*\n?", re.MULTILINE)


def include_lines(text: str) -> tuple[str, ...]:
    """The includes ``text`` names on its own ``-- @include <name>`` lines, in order."""
    return tuple(_INCLUDE.findall(text))


def _read_includes() -> Mapping[str, str]:
    found: dict[str, str] = {}
    for entry in resources.files(__package__).joinpath("lua", "include").iterdir():
        if entry.name.endswith(".lua"):
            found[entry.name[:-4]] = entry.read_text(encoding="utf-8")
    return found


#: each include's text as written (its own ``-- @include`` lines in it)
INCLUDES: Mapping[str, str] = _read_includes()


def expand_includes(
    name: str, source: str, includes: Mapping[str, str] = INCLUDES
) -> tuple[str, tuple[str, ...]]:
    """``source`` as it runs: each ``-- @include <x>`` line replaced by the includes it
    brings that are not in yet (what ``x`` includes first, depth first, then ``x``); and
    every include pulled in, in order.

    Raises:
        ValueError: a name with no ``lua/include/<name>.lua``, or a cycle (an include that
            includes itself through others); the message names the chain.
    """
    order: list[str] = []
    done: set[str] = set()

    def bring(include: str, chain: tuple[str, ...]) -> list[str]:
        if include in done:
            return []
        path = " -> ".join((*chain, include))
        if include in chain:
            raise ValueError(f"include cycle: {path}")
        text = includes.get(include)
        if text is None:
            raise ValueError(f"{path}: no lua/include/{include}.lua")
        blocks: list[str] = []
        for needed in include_lines(text):
            blocks += bring(needed, (*chain, include))
        done.add(include)
        order.append(include)
        body = _INCLUDE_LINE.sub("", text).rstrip()
        blocks.append(f"-- @begin include {include}\n{body}\n-- @end include {include}")
        return blocks

    def expand(match: re.Match[str]) -> str:
        return "\n".join(bring(match[1], (f"{name}.lua",)))

    # a line whose includes are all in already leaves an empty line (the line count of the
    # script's own text is kept)
    return _INCLUDE.sub(expand, source), tuple(order)


def make_script(
    name: str, source: str, includes: tuple[str, ...] = (), uses: tuple[str, ...] = ()
) -> Script:
    """A :class:`Script` (``source`` already expanded) and, when it publishes, its sharded
    twin."""
    twin = None
    spublish = sharded_source(source)
    if spublish != source:
        sha = hashlib.sha1(spublish.encode()).hexdigest()
        twin = Script(f"{name}@sharded", spublish, sha, None, includes, uses)
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest(), twin, includes, uses)


def _load_all() -> Mapping[str, Script]:
    found: dict[str, Script] = {}
    for entry in resources.files(__package__).joinpath("lua").iterdir():
        if entry.name.endswith(".lua"):
            name = entry.name[:-4]
            text = entry.read_text(encoding="utf-8")
            source, pulled = expand_includes(name, text)
            found[name] = make_script(name, source, pulled, include_lines(text))
    return found


SCRIPTS: Mapping[str, Script] = _load_all()


def include_constant(include: str, name: str) -> int:
    """The whole number ``include/<include>.lua`` sets with ``local <name> = <digits>``.

    Raises:
        RuntimeError: the include sets no such number.
    """
    value = lua_constants(INCLUDES[include]).get(name)
    if value is None:
        raise RuntimeError(f"lua/include/{include}.lua does not set {name}")
    return value


def lua_names(script: str, name: str) -> tuple[str, ...]:
    """The names of the locals ``<script>.lua`` unpacks under its comment ``-- <name>:``
    (the first ``local a, b, ... = unpack(...)`` after it, in order); their count must be
    the script's ``local SET, JOB = <digits>, <digits>`` ``SET``.

    Raises:
        RuntimeError: the script has no such comment, no unpack after it, or a count
            other than ``SET``.
    """
    text = resources.files(__package__).joinpath("lua", f"{script}.lua").read_text("utf-8")
    match = re.search(
        rf"^\s*-- {name}:.*?^\s*local ([\w,\s]+?)\s*=\s*unpack\(", text, re.MULTILINE | re.DOTALL
    )
    if match is None:
        raise RuntimeError(f"lua/{script}.lua does not unpack the names {name}")
    names = tuple(re.split(r"[\s,]+", match[1].strip()))
    count = re.search(r"^local SET, JOB = (\d+), \d+", text, re.MULTILINE)
    if count is None or int(count[1]) != len(names):
        raise RuntimeError(f"lua/{script}.lua: {name} has {len(names)} names, not its SET")
    return names


#: the version of the queue's data layout, written by ``mark_queue`` (``include/schema.lua``)
#: into ``emq:{q}:meta`` and checked by every worker at start (``admin.ensure_schema``)
SCHEMA_VERSION: int = include_constant("schema", "SCHEMA_VERSION")
#: the layout version of a repeat record (``include/repeat.lua``): its field ``v``
REPEAT_FORMAT: int = include_constant("repeat", "REPEAT_FORMAT")
#: the fields of one enqueue option set, in the order ``enqueue.lua`` reads them
#: (the locals under its ``SET_FIELDS`` comment): ``jobs/lifecycle`` sends each set in this order
ENQUEUE_SET_FIELDS: tuple[str, ...] = lua_names("enqueue", "SET_FIELDS")
