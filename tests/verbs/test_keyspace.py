"""The key builder: one hash tag per queue, the name gate, and docs/keyspace.md complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from echomq._scripts.keyspace import Keyspace, check_id
from echomq.errors import InvalidKey

DOC = Path(__file__).resolve().parents[2] / "docs" / "keyspace.md"


def test_every_key_carries_the_queue_hash_tag() -> None:
    """Each key of queue q starts with emq:{q}: so the queue lives in one cluster slot."""
    ks = Keyspace("emails")
    names = [n for n, v in vars(Keyspace).items() if isinstance(v, property)]
    for name in names:
        assert getattr(ks, name).startswith("emq:{emails}"), name
    assert ks.job("a.b_c~d-1") == "emq:{emails}:job:a.b_c~d-1"
    assert ks.logs("x") == "emq:{emails}:job:x:logs"
    assert ks.lock("x") == "emq:{emails}:job:x:lock"


def test_keyspace_page_lists_every_key() -> None:
    """docs/keyspace.md has a row for every Keyspace attribute."""
    text = DOC.read_text(encoding="utf-8")
    ks = Keyspace("q")
    names = [n for n, v in vars(Keyspace).items() if isinstance(v, property)]
    for name in [*names, "job", "logs", "lock"]:
        if name in ("base", "pattern"):
            continue
        assert f"(`{name}" in text, name
    assert "`emq:{q}:job:<id>`" in text and ks.meta in text


@pytest.mark.parametrize("name", ["a", "A-Z_0.9~", "x" * 128])
def test_valid_names_pass(name: str) -> None:
    """1..128 characters of [A-Za-z0-9._~-] are accepted as queue names and ids."""
    assert Keyspace(name).queue == name
    assert check_id(name) == name


@pytest.mark.parametrize("name", ["", "x" * 129, "a b", "a:b", "{a}", "a*", "é", "a\n", b"a"])
def test_invalid_names_raise_invalid_key(name: object) -> None:
    """Anything else raises InvalidKey (a ValueError), for queues and ids alike."""
    with pytest.raises(InvalidKey):
        Keyspace(name)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Keyspace("q").job(name)  # type: ignore[arg-type]
