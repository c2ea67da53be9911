"""A queue's lifecycle events: one pub/sub subscription fanned out to memory channels.

``open_event_feed(url, queue)`` subscribes once; ``feed.listen(job=..., events=...)``
hands out filtered channels of :class:`Event`. Events are fire-and-forget (at most once):
a listener that was not subscribed, or whose buffer was full, misses them.
``event_channel(queue)`` names the channel, for code that follows many queues on one
subscription of its own (the dashboard).

This module is the public face; the implementation lives in ``echomq._verbs.feed``.
"""

from __future__ import annotations

from ._verbs.feed import Event, EventFeed, event_channel, open_event_feed

__all__ = ["Event", "EventFeed", "event_channel", "open_event_feed"]
