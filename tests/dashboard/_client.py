"""A websocket client for the protocol tests: reads typed messages with bounded waits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio_websocket

from echomq.dashboard import DashboardInfo


class Client:
    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.ref = 0

    async def next(
        self, kind: str, where: Callable[[dict[str, Any]], bool] | None = None
    ) -> dict[str, Any]:
        """The next message of type ``kind`` (and matching ``where``); others are skipped."""
        with trio.fail_after(5):
            while True:
                message = json.loads(await self.ws.get_message())
                if message["type"] == kind and (where is None or where(message)):
                    return message

    async def send(self, **message: Any) -> None:
        await self.ws.send_message(json.dumps(message))

    async def command(self, action: str, queue: str, job: str | None = None,
                      token: str | None = None) -> dict[str, Any]:  # fmt: skip
        self.ref += 1
        ref = self.ref
        message: dict[str, Any] = {"type": "command", "ref": ref, "action": action, "queue": queue}
        if job is not None:
            message["job"] = job
        if token is not None:
            message["token"] = token
        await self.send(**message)
        return await self.next("result", lambda m: m["ref"] == ref)


def ws_url(info: DashboardInfo) -> str:
    return f"ws://127.0.0.1:{info.port}/ws"


@asynccontextmanager
async def own_websocket(port: int) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """A websocket to ``/ws`` on a TCP stream this test owns and closes: trio-websocket's
    client leaves its socket open when the server ends the connection (a 1009 close)."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        async with trio.open_nursery() as nursery:
            ws = await trio_websocket.wrap_client_stream(
                nursery, stream, f"127.0.0.1:{port}", "/ws", max_message_size=2**22
            )
            try:
                yield ws
            finally:
                await ws.aclose()
                nursery.cancel_scope.cancel()
