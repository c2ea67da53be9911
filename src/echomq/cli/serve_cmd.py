"""``echomq dashboard`` and ``echomq demo``: long-running services with their own loop.

Their modules are imported when the command runs (``lazy``), so the rest of the CLI works
without them and starts without their imports.
"""

from __future__ import annotations

import argparse
import inspect
from functools import partial
from typing import Any

import trio

from ..errors import EchoMQError, InvalidArgument, InvalidKey
from .common import DONE, REFUSED, USAGE, Commands, lazy, port, refusal, say, url_of

__all__ = ["call_entry", "register"]


def call_entry(args: argparse.Namespace, module: str, name: str, **kwargs: Any) -> int:
    """Call a blocking (or async) entry point that answers an exit code.

    Options the user did not give (None) are left out, so the entry point's defaults hold.
    """
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:
        entry = lazy(module, name, args.command)
    except EchoMQError as exc:
        say(args, str(exc))
        return REFUSED
    try:
        if inspect.iscoroutinefunction(entry):
            code = trio.run(partial(entry, **kwargs))
        else:
            code = entry(**kwargs)
    except KeyboardInterrupt:
        return DONE
    except (InvalidKey, InvalidArgument) as exc:
        say(args, str(exc))
        return USAGE
    except EchoMQError as exc:
        say(args, refusal(exc, args))
        return REFUSED
    return int(code or 0)


def _dashboard(args: argparse.Namespace) -> int:
    return call_entry(
        args,
        "echomq.dashboard",
        "run_dashboard",
        url=url_of(args),
        host=args.host,
        port=args.port,
        token=args.token,
        queues=args.queues or None,
        allowed_hosts=args.allow_hosts or None,
        archive=args.archive,
    )


def _demo(args: argparse.Namespace) -> int:
    return call_entry(
        args,
        "echomq._testkit.demo",
        "run_demo",
        url=getattr(args, "url", None) or "embedded://",  # never $ECHOMQ_URL unasked
        duration=args.duration,
        port=args.port,
        dashboard=not args.no_dashboard,
    )


def register(commands: Commands) -> None:
    p = commands.add("dashboard", "serve the live dashboard on loopback", entry=_dashboard)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others: --allow-host)")  # fmt: skip
    p.add_argument("--port", type=port, help="0..65535, 0 for any free port (default 8000)")
    p.add_argument("--token", help="required by the operator buttons: 8..256 of "
                   "[A-Za-z0-9._~-] (default: generated)")  # fmt: skip
    p.add_argument("--queue", dest="queues", action="append", help="follow this queue (repeat)")
    p.add_argument("--archive", metavar="URL",
                   help="show a history panel read from this archive (sqlite:///... or "
                        "postgresql://..., as `echomq archive --to` writes)")  # fmt: skip
    p.add_argument("--allow-host", dest="allow_hosts", action="append", metavar="NAME",
                   help="a Host name browsers may use besides loopback (repeat; needed to "
                   "bind a non-loopback --host)")  # fmt: skip

    p = commands.add(
        "demo", "a demo: producers, workers and the dashboard (embedded Redis)", entry=_demo
    )
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--port", type=port, help="the dashboard's port")
    p.add_argument("--no-dashboard", action="store_true")
