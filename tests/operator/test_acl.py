"""The ACL rules of docs/operations.md ("Redis ACLs") are enough, each for its role.

The rules are read from the docs (one place for each fact), each user is created on a
private redis-server with ``ACL SETUSER``, and each role's work runs through a
``redis://user:pass@...`` URL of its own (tests/operator/_acl_roles.py): a worker serving
jobs (with cancellation, a flow and a chord across queues, repeatables), a producer
enqueuing and waiting for results, the CLI's commands, the archive recording, the
dashboard reading. Afterwards the server's ``ACL LOG`` holds no refusal.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from _acl_roles import ROLES, run_roles

import echomq
from echomq.testing import RedisServer

DOCS = Path(__file__).parents[2] / "docs" / "operations.md"
PASSWORD = "s3cret-pw"


def documented_rules() -> dict[str, list[str]]:
    """role -> the rule's words after the user name, from the section's code block."""
    text = DOCS.read_text()
    section = text.split("\n## Redis ACLs\n", 1)[1].split("\n## ", 1)[0]
    rules: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("ACL SETUSER emq-"):
            words = shlex.split(line)
            rules[words[2].removeprefix("emq-")] = words[3:]
    return rules


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_the_docs_give_a_narrow_rule_for_every_role() -> None:
    rules = documented_rules()
    assert set(rules) == set(ROLES)
    for role, words in rules.items():
        assert words[:2] == ["on", ">PASSWORD"], role
        assert {"resetkeys", "~emq:*", "resetchannels", "&emq:*", "-@all"} <= set(words), role
        assert not any(w.startswith("+@") for w in words), (role, "no whole category")
        assert all(
            re.fullmatch(r"\+[a-z]+(\|[a-z]+)?", w) for w in words[words.index("-@all") + 1 :]
        )


async def test_each_role_works_with_its_documented_rule_alone(
    server: RedisServer, tmp_path: Path, queue: str
) -> None:
    """Before: no rule was written down; a worker, a producer and result() together
    needed commands nobody listed, INFO (in @dangerous) among them."""
    rules = documented_rules()
    urls: dict[str, str] = {}
    async with echomq.connect(server.url) as admin:
        await admin.execute("ACL", "LOG", "RESET")
        for role, words in rules.items():
            words = [f">{PASSWORD}" if w == ">PASSWORD" else w for w in words]
            assert await admin.execute("ACL", "SETUSER", f"emq-{role}", *words) == b"OK"
            urls[role] = f"redis://emq-{role}:{PASSWORD}@127.0.0.1:{server.port}/0"
        await run_roles(urls, f"{queue}-a", f"{queue}-b", f"{queue}-c", tmp_path / "archive.db")
        log = await admin.execute("ACL", "LOG")
        for role in ROLES:  # and nothing broader than echomq's: no FLUSHALL, no KEYS
            found = await admin.execute("ACL", "DRYRUN", f"emq-{role}", "FLUSHALL")
            assert found != b"OK", role
    refusals = [dict(zip(entry[::2], entry[1::2], strict=True)) for entry in log]
    assert refusals == [], [(r[b"username"], r[b"reason"], r[b"object"]) for r in refusals]
