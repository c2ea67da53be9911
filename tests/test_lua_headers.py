"""Every Lua script's header agrees with its body, the reply table and TRANSITIONS.

Checked for each ``_scripts/lua/*.lua`` as it runs (its ``-- @include`` lines expanded; no
server needed):
- the header block names KEYS, ARGV, Returns, Events and Moves;
- every ``KEYS[n]`` / ``ARGV[n]`` the body reads is declared in the header;
- every refusal (``return -N``, ``redis.error_reply``) is documented (Returns / Errors),
  maps to a typed error in ``replies.py``, and comes before the first write;
- the Moves line is exactly the script's row of ``_model/states.TRANSITIONS``;
- the header states the script's bound (``Bound``: its cost per call); a script whose work
  grows with an argument checks that argument against its cap (``include/caps.lua``, the
  numbers Python gates the verbs with) in the body, before its first write;
- every include (``lua/include/*.lua``) is used; a script (or an include) includes what its
  own code uses, and uses what it includes; a helper that writes counts as a write where
  it is called.
"""

from __future__ import annotations

import re

import pytest

from echomq._model import caps
from echomq._model.states import TRANSITIONS, JobState, Moves
from echomq._scripts import replies
from echomq._scripts.loader import INCLUDES, SCRIPTS, include_lines
from echomq.errors import EchoMQError, ScriptError, ServerError

FIELDS = ("KEYS", "ARGV", "Returns", "Errors", "Events", "Moves", "Bound")
REQUIRED = ("KEYS", "ARGV", "Returns", "Events", "Moves", "Bound")
# scripts whose work grows with an argument: the cap (include/caps.lua, read by Python as
# _model/caps) the script checks it against (it refuses a bigger one with EMQARG)
CAPPED = {
    "claim": "MAX_COUNT",
    "enqueue": "MAX_ENQUEUE",
    "add_flow": "MAX_FLOW",
    "flow_cancel": "MAX_FLOW",
    "flow_held": "MAX_FLOW_PAGE",
    "flow_results": "MAX_FLOW_PAGE",
    "extend_locks": "MAX_HELD",
    "release": "MAX_HELD",
    "complete_many": "MAX_HELD",
    "reap": "MAX_BATCH",
    "stalled_check": "MAX_BATCH",
    "drain": "MAX_BUDGET",
    "obliterate": "MAX_BUDGET",
    "queue_stats": "MAX_MINUTES",
    "repeat_due": "MAX_REPEAT_PAGE",
    "repeat_list": "MAX_REPEAT_PAGE",
    "fence_cancels": "MAX_BATCH",
    "list_workers": "MAX_BATCH",
    "heartbeat": "MAX_BEAT_FIELDS",
    "lanes_rejoin": "MAX_BUDGET",
    "retention_sweep": "MAX_SWEEP",
}
WRITES = (
    "ZADD ZREM ZPOPMIN ZPOPMAX ZINCRBY ZREMRANGEBYSCORE ZREMRANGEBYRANK HSET HSETNX HMSET HDEL "
    "HINCRBY DEL UNLINK SET SETNX INCR INCRBY RPUSH LPUSH LPOP RPOP LTRIM LREM EXPIRE PEXPIRE "
    "EXPIREAT PEXPIREAT PERSIST XADD XTRIM XDEL PUBLISH"
).split()
_WRITE_CALL = r"redis\.call\(\s*'(" + "|".join(WRITES) + r")'"
_DEFINED = re.compile(r"^local (?:function )?(\w+)", re.MULTILINE)
# include helpers whose body writes: a call to one is a write where it is made (each
# function's body is its text up to its closing top-level `end`, or the next top-level
# `local`; a helper that calls a writing helper writes too)
_FUNCTION = re.compile(r"^local function (\w+)\(.*?(?=^end$|^local |\Z)", re.MULTILINE | re.DOTALL)


def _writing_helpers() -> list[str]:
    bodies = {m[1]: m[0] for text in INCLUDES.values() for m in _FUNCTION.finditer(text)}
    writing = {name for name, body in bodies.items() if re.search(_WRITE_CALL, body, re.I)}
    while True:
        more = {
            name
            for name, body in bodies.items()
            if name not in writing and any(re.search(rf"\b{w}\(", body) for w in writing)
        }
        if not more:
            return sorted(writing)
        writing |= more


WRITING_HELPERS = _writing_helpers()
_WRITE = re.compile(
    "|".join([_WRITE_CALL, *(rf"\b{name}\(" for name in WRITING_HELPERS)]), re.IGNORECASE
)
_REFUSAL = re.compile(r"return\s+-\d+|redis\.error_reply\(")
_INCLUDED = re.compile(r"^-- @begin include (\w+)\n.*?^-- @end include \1\n", re.S | re.M)


def _split(source: str) -> tuple[dict[str, str], str]:
    match = re.match(r"\s*--\[\[\n(.*?)\n\]\]\n", source, re.DOTALL)
    assert match, "the file must open with a --[[ ... ]] header block"
    fields: dict[str, str] = {}
    current: str | None = None
    for line in match.group(1).splitlines():
        head = re.match(r"  (" + "|".join(FIELDS) + r")\b\s*(.*)", line)
        if head:
            current = head.group(1)
            fields[current] = head.group(2)
        elif current and line.startswith("   "):
            fields[current] += "\n" + line.strip()
        else:
            current = None
    return fields, source[match.end() :]


def _code_lines(body: str) -> list[str]:
    """The body's code, comments cut; included text blanked (its lines kept, empty)."""
    body = _INCLUDED.sub(lambda m: "\n" * m[0].count("\n"), body)
    return [line.split("--", 1)[0] for line in body.splitlines()]


def _numbers(declared: str) -> set[int]:
    return {int(n) for n in re.findall(r"(?:^|\s)(\d+)(?:\.\.)?\s+[A-Za-z_'(:]", declared)}


def _parse_moves(text: str) -> Moves:
    moves: Moves = {}
    if text.strip() == "(none)":
        return moves

    def states(side: str) -> set[JobState | None]:
        out: set[JobState | None] = set()
        for token in side.split("|"):
            word = token.strip().split()[0]
            out.add(None if word == "(none)" else JobState(word))
        return out

    for clause in text.replace("\n", " ").split(";"):
        left, right = clause.split("->")
        for source in states(left):
            moves[source] = frozenset(moves.get(source, frozenset()) | states(right))
    return moves


NAMES = sorted(SCRIPTS)


@pytest.mark.parametrize("name", NAMES)
def test_header_names_every_field(name: str) -> None:
    """KEYS, ARGV, Returns, Events and Moves are in the header."""
    fields, _ = _split(SCRIPTS[name].source)
    missing = [f for f in REQUIRED if not fields.get(f, "").strip()]
    assert not missing, f"{name}.lua header lacks {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_header_states_the_bound_and_the_body_checks_its_cap(name: str) -> None:
    """The Bound field says what one call costs; a capped script includes the caps, names its
    cap there and checks the argument against it with an EMQARG refusal (before its first
    write: test_every_refusal_comes_before_the_first_write)."""
    fields, body = _split(SCRIPTS[name].source)
    bound = fields.get("Bound", "")
    assert re.search(r"O\(", bound), f"{name}.lua: Bound must state the cost, e.g. O(log N)"
    if name not in CAPPED:
        return
    cap = CAPPED[name]
    assert "caps" in SCRIPTS[name].uses, f"{name}.lua: no `-- @include caps` line"
    code = "\n".join(_code_lines(body))
    assert re.search(rf">\s*{cap}\b", code), f"{name}.lua: no check of an argument > {cap}"
    assert f"at most {cap}" in bound, f"{name}.lua: the Bound line must name the cap {cap}"
    assert "EMQARG" in fields.get("Errors", ""), f"{name}.lua: the cap's refusal is EMQARG"


def test_every_cap_python_uses_is_written_once_in_the_lua() -> None:
    """Each cap of _model/caps.py is a `local MAX_... = <digits>` of include/caps.lua (read
    at import, so equal by construction), and the include holds no cap Python lacks; no
    script writes a cap's number again as a `local MAX_...` of its own."""
    lua = caps.lua_constants(INCLUDES["caps"])
    python = {name: getattr(caps, name) for name in caps.__all__ if name.startswith("MAX_")}
    assert lua == python
    for name, script in SCRIPTS.items():
        _, body = _split(script.source)
        code = "\n".join(_code_lines(body))
        again = set(re.findall(r"^local (MAX_\w+) =", code, re.MULTILINE)) & set(lua)
        assert not again, f"{name}.lua sets {again} again: include caps instead"


@pytest.mark.parametrize("name", NAMES)
def test_body_reads_only_declared_keys_and_args(name: str) -> None:
    """Every literal KEYS[n] and ARGV[n] in the body is declared in the header."""
    fields, body = _split(SCRIPTS[name].source)
    code = "\n".join(_code_lines(body))
    for kind in ("KEYS", "ARGV"):
        used = {int(n) for n in re.findall(kind + r"\[(\d+)\]", code)}
        assert used <= _numbers(fields.get(kind, "")), f"{name}.lua: undeclared {kind} {used}"


@pytest.mark.parametrize("name", NAMES)
def test_refusals_are_documented_and_typed(name: str) -> None:
    """Each refusal code is in Returns, each error prefix in Errors, and both map to a type."""
    fields, body = _split(SCRIPTS[name].source)
    code = "\n".join(_code_lines(body))
    for number in set(re.findall(r"return\s+(-\d+)", code)):
        assert number in fields["Returns"], f"{name}.lua: {number} not in Returns"
        with pytest.raises(EchoMQError) as raised:
            replies.check_status(int(number), name)
        assert not isinstance(raised.value, ScriptError), f"{name}.lua: {number} is untyped"
    for message in re.findall(r"redis\.error_reply\(\s*'([^']*)'", code):
        prefix = message.split()[0]
        assert prefix in fields.get("Errors", ""), f"{name}.lua: {prefix} not in Errors"
        assert type(replies.translate(message)) is not ServerError, f"untyped {message!r}"


@pytest.mark.parametrize("name", NAMES)
def test_every_refusal_comes_before_the_first_write(name: str) -> None:
    """Lua does not roll back: no refusal may follow a write."""
    _, body = _split(SCRIPTS[name].source)
    lines = _code_lines(body)
    writes = [i for i, line in enumerate(lines) if _WRITE.search(line)]
    refusals = [i for i, line in enumerate(lines) if _REFUSAL.search(line)]
    if writes and refusals:
        assert max(refusals) < min(writes), (
            f"{name}.lua: refusal on line {max(refusals) + 1} after a write on {min(writes) + 1}"
        )


@pytest.mark.parametrize("name", NAMES)
def test_moves_line_matches_transitions(name: str) -> None:
    """The header's Moves line is the script's row of TRANSITIONS (none when absent)."""
    fields, _ = _split(SCRIPTS[name].source)
    assert _parse_moves(fields["Moves"]) == TRANSITIONS.get(name, {})


def test_every_include_is_used() -> None:
    """Each ``lua/include/*.lua`` is pulled into some script."""
    used = {include for script in SCRIPTS.values() for include in script.includes}
    assert set(INCLUDES) == used, f"unused includes: {set(INCLUDES) - used}"


def _own_code(text: str) -> str:
    """A script's or an include's own code: comments cut, included text blanked."""
    return "\n".join(_code_lines(text))


# what each include defines (its top-level locals), and its own code
DEFINES = {name: set(_DEFINED.findall(text)) for name, text in INCLUDES.items()}
UNITS = {
    **{f"{name}.lua": (_own_code(_split(s.source)[1]), s.uses) for name, s in SCRIPTS.items()},
    **{f"include/{n}.lua": (_own_code(t), include_lines(t)) for n, t in INCLUDES.items()},
}


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_each_include_line_brings_what_its_own_code_uses(unit: str) -> None:
    """A script or an include names on its own ``-- @include`` lines exactly what its own
    code uses: each line brings a name the code uses (no dead text), and every helper it
    calls or constant it reads from an include is named on one of its lines (what a
    helper needs is that helper's include's business, not the caller's)."""
    code, lines = UNITS[unit]
    own = DEFINES.get(unit.removeprefix("include/").removesuffix(".lua"), set())
    for include in lines:
        named = DEFINES[include] - own
        assert any(re.search(rf"\b{d}\b", code) for d in named), (
            f"{unit} includes {include} but uses none of {sorted(named)}"
        )
    for include, defined in DEFINES.items():
        if include in lines or unit == f"include/{include}.lua":
            continue
        reached = [
            d
            for d in defined - own
            if re.search(rf"\b{d}\(", code) or (d.isupper() and re.search(rf"\b{d}\b", code))
        ]
        assert not reached, f"{unit} uses {reached} of include {include}: name it on a line"


def test_helpers_come_after_what_they_need() -> None:
    """An include that calls another's helper is included after it in every script."""
    for name, script in SCRIPTS.items():
        order = list(script.includes)
        for i, include in enumerate(order):
            for needed in order[i + 1 :]:
                own = set(_DEFINED.findall(INCLUDES[include]))
                calls = [d for d in _DEFINED.findall(INCLUDES[needed]) if d not in own]
                assert not any(re.search(rf"\b{d}\(", INCLUDES[include]) for d in calls), (
                    f"{name}.lua: include {include} calls into {needed}, included after it"
                )


def test_includes_write_as_their_helpers_say() -> None:
    """The helpers that write are known to the write check (push_wake, mark_queue,
    finished, the lanes' ready / leave_active / lane_join, the claim's lane turns and rate
    windows once placed and counted); the read-only ones are not."""
    writing = {"push_wake", "mark_queue", "finished", "ready", "leave_active", "lane_join"}
    writing |= {"lane_turns_place", "lane_turns_count", "count_starts"}
    assert writing <= set(WRITING_HELPERS)
    reading = {"finish_read", "lanes_touch", "group_slots", "lane_key", "lane_turns"}
    assert not (reading | {"rate_window", "window_left"}) & set(WRITING_HELPERS)
    assert not re.search(_WRITE_CALL, INCLUDES["time"] + INCLUDES["score"])


def test_every_transition_row_names_a_script_or_a_planned_one() -> None:
    """TRANSITIONS has no row for a script that is neither present nor in DESIGN.md."""
    planned = {"drain", "obliterate", "remove_job", "reprocess_job"}
    assert set(TRANSITIONS) <= set(SCRIPTS) | planned


def test_the_moves_parser_reads_the_header_forms() -> None:
    """The parser reads notes, alternatives, several clauses and (none)."""
    assert _parse_moves("scheduled -> pending (due); pending -> active") == {
        JobState.SCHEDULED: frozenset({JobState.PENDING}),
        JobState.PENDING: frozenset({JobState.ACTIVE}),
    }
    assert _parse_moves("(none) -> pending | scheduled") == {
        None: frozenset({JobState.PENDING, JobState.SCHEDULED})
    }
    assert _parse_moves("dead | pending -> (none)") == {
        JobState.DEAD: frozenset({None}),
        JobState.PENDING: frozenset({None}),
    }
    assert _parse_moves("(none)") == {}
