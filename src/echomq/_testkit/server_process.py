"""What the private servers share: a port, a directory, a context manager.

Rule 1: a server started on a port it chose (``port=0``) chooses again when another process
took that port between the choice and the bind (``PortTaken`` from its spawn), at most three
times; a port the caller gave is an error at once.
Rule 2: ``stop()`` removes the directory the server made (never one the caller gave).
Rule 3: a server is a context manager: ``with Server() as s:`` starts it and stops it.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = ["PortTaken", "ServerProcess", "free_port"]

S = TypeVar("S", bound="ServerProcess")


class PortTaken(Exception):
    """The chosen port was taken between choosing it and binding it."""


class ServerProcess:
    """A mixin for the attrs server classes (their fields: ``port``, ``dir``, ``_owned_dir``)."""

    port: int
    dir: Path | None
    _owned_dir: bool

    def start(self: S) -> S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _spawn_on_a_port(
        self, spawn: Callable[[], None], error: Callable[[str], Exception]
    ) -> None:
        """Rule 1: ``spawn()`` on ``port``, or on a free one chosen (again) for ``port=0``."""
        chosen = not self.port
        for attempt in range(3):
            if chosen:
                self.port = free_port()
            try:
                spawn()
                return
            except PortTaken:
                if not chosen or attempt == 2:
                    raise error(f"port {self.port} is in use") from None

    def _remove_owned_dir(self) -> None:
        """Rule 2."""
        if self._owned_dir and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
            self._owned_dir = False

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
