"""``echomq version`` (and ``echomq --version``): ``echomq 0.2.0``, from ``echomq.__version__``."""

from __future__ import annotations

import argparse

from .common import DONE, Commands

__all__ = ["register", "version_line"]


def version_line() -> str:
    from .. import __version__

    return f"echomq {__version__}"


def _version(args: argparse.Namespace) -> int:
    print(version_line())
    return DONE


def register(commands: Commands) -> None:
    commands.add("version", "print echomq's version", entry=_version)
