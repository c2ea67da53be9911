"""The live dashboard: a page on loopback kept current over a websocket (DESIGN.md §7).

``serve_dashboard`` embeds it in a Trio program (``nursery.start`` answers a
:class:`DashboardInfo`); ``run_dashboard`` is the blocking ``echomq dashboard``.
Layout: ``server`` (HTTP + websocket on one port, Origin and token rules), ``hub``
(polling, event fan-out), ``state`` (read-only queue views), ``commands`` (the operator
buttons), ``messages`` (the JSON shapes and their refusals), ``http_io`` (the page's
assets, served by the shared ``echomq._http`` server), ``static/`` (the page: no CDN,
works offline).
"""

from __future__ import annotations

from .server import DashboardInfo, run_dashboard, serve_dashboard

__all__ = ["DashboardInfo", "run_dashboard", "serve_dashboard"]
