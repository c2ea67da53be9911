"""The Lua loader (``_scripts/loader.py``): nested includes, each once and in dependency
order, a clear refusal of a cycle or an unknown name; the values Python reads out of the
Lua (``_model/caps.lua_constants`` / ``lua_table``, ``loader.lua_names``). No server needed.
"""

from __future__ import annotations

import re

import pytest

from echomq._model import caps
from echomq._scripts import functions, loader
from echomq._scripts.loader import INCLUDES, SCRIPTS, expand_includes


def _blocks(source: str) -> list[str]:
    return re.findall(r"^-- @begin include (\w+)$", source, re.MULTILINE)


FAKE = {
    "base": "local BASE = 1",
    "left": "-- uses base\n-- @include base\nlocal function left() return BASE end",
    "right": "-- @include base\nlocal function right() return BASE end",
    "top": "-- @include right\n-- @include left\nlocal function top() return left() + right() end",
}


def test_an_include_brings_what_it_includes_first_and_each_once() -> None:
    """A diamond (top -> right, left -> base) expands to base, right, left, top: each once,
    every include after those it names; its own include lines are gone."""
    source, order = expand_includes("s", "local x = 1\n-- @include top\nreturn top()\n", FAKE)
    assert order == ("base", "right", "left", "top")
    assert _blocks(source) == ["base", "right", "left", "top"]
    assert "-- @include" not in source
    assert source.startswith("local x = 1\n-- @begin include base\nlocal BASE = 1\n")
    assert source.endswith("-- @end include top\nreturn top()\n")
    assert "-- uses base\nlocal function left()" in source  # the include's comment is kept


def test_a_line_whose_include_is_in_already_brings_nothing() -> None:
    """A script naming an include that another of its includes brought gets no second copy;
    its line leaves an empty line."""
    source, order = expand_includes("s", "-- @include left\n-- @include base\nreturn 1\n", FAKE)
    assert order == ("base", "left")
    assert source.count("local BASE = 1") == 1
    assert source.endswith("-- @end include left\n\nreturn 1\n")


@pytest.mark.parametrize(
    ("includes", "message"),
    [
        ({"a": "-- @include b", "b": "-- @include a"}, "include cycle: s.lua -> a -> b -> a"),
        ({"a": "-- @include a"}, "include cycle: s.lua -> a -> a"),
        ({"a": "-- @include nope"}, "s.lua -> a -> nope: no lua/include/nope.lua"),
    ],
)
def test_a_cycle_or_an_unknown_include_is_refused_by_name(
    includes: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_includes("s", "-- @include a\n", includes)


def test_every_script_runs_its_includes_expanded_once_in_order() -> None:
    """Every script: no include line left, each include once, after every include it names
    (its begin marker after theirs), and ``includes`` the order of the markers."""
    for name, script in SCRIPTS.items():
        blocks = _blocks(script.source)
        assert not re.search(r"^-- @include ", script.source, re.MULTILINE), name
        assert blocks == list(script.includes), name
        assert len(set(blocks)) == len(blocks), name
        for i, include in enumerate(blocks):
            needed = set(loader.include_lines(INCLUDES[include]))
            assert needed <= set(blocks[:i]), f"{name}.lua: {include} before {needed}"
        assert set(script.uses) <= set(script.includes), name


def test_nested_includes_reach_the_sharded_twin_and_the_functions_library() -> None:
    """A PUBLISH in an include pulled in through another (reap -> stall_sweep -> finished)
    is SPUBLISH in the sharded twin; the library holds every script's expanded source."""
    reap = SCRIPTS["reap"]
    assert "finished" in reap.includes and "finished" not in reap.uses
    assert "redis.call('PUBLISH'" not in re.sub(
        r"(?s)-- @begin include.*?-- @end include \w+", "", reap.source
    )
    twin = reap.sharded
    assert twin is not None and twin.includes == reap.includes
    assert "'PUBLISH'" not in twin.source
    assert twin.source.count("'SPUBLISH'") == reap.source.count("'PUBLISH'") > 0
    library = functions.library_source()
    sharded = functions.library_source(sharded=True)
    for script in SCRIPTS.values():
        assert script.source in library
        assert script.variant(True).source in sharded


def test_the_numbers_are_read_from_the_lua() -> None:
    """The layout versions, the caps, the enqueue option set's order and the retention
    table are read from the Lua text; a malformed one is refused, not misread."""
    assert loader.SCHEMA_VERSION == caps.lua_constants(INCLUDES["schema"])["SCHEMA_VERSION"]
    assert loader.REPEAT_FORMAT == caps.lua_constants(INCLUDES["repeat"])["REPEAT_FORMAT"]
    assert caps.MAX_MS == 2**40 and caps.MAX_PRIORITY * 2**40 + 2**40 < 2**53
    assert caps.lua_constants("local A = 12  -- twelve\nlocal B = x\n  local C = 3") == {"A": 12}
    assert caps.lua_table("local T = {\n  a = 1,  -- one\n  b = 22,\n}\n", "T") == {"a": 1, "b": 22}
    with pytest.raises(RuntimeError, match="key = <digits>"):
        caps.lua_table("local T = {\n  a = 1,\n  b = 2 * 3,\n}\n", "T")
    with pytest.raises(RuntimeError, match="no table U"):
        caps.lua_table("local T = {\n}\n", "U")
    with pytest.raises(RuntimeError, match="does not set NOPE"):
        loader.include_constant("schema", "NOPE")
    fields = loader.ENQUEUE_SET_FIELDS
    assert fields[:3] == ("delay_ms", "priority", "max_attempts") and len(set(fields)) == 13
    assert re.search(r"^local SET, JOB = 13, 3", SCRIPTS["enqueue"].source, re.M)
    with pytest.raises(RuntimeError, match="does not unpack the names NOPE"):
        loader.lua_names("enqueue", "NOPE")
