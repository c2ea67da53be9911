"""``echomq archive`` and ``echomq history``: the archive's commands (``echomq.archive``),
declared through the registry like every other command.

The archive package keeps its own parser code (``archive/commands.add_commands``, which
takes a sub-parser factory); this module hands it one built on :meth:`Commands.add`, and
runs the entry the archive set (``args.entry(args, err)``).
"""

from __future__ import annotations

import argparse
from typing import Literal

from .common import Commands, consoles

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    _, err = consoles()
    code: int = args.entry(args, err)
    return code


def register(commands: Commands) -> None:
    from ..archive.commands import add_commands

    def command(
        name: str, help: str, *, queue: Literal["positional", "option"] | None = None
    ) -> argparse.ArgumentParser:
        return commands.add(name, help, queue=queue, entry=_run)

    add_commands(None, command)
