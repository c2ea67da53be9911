"""``python -m echomq``: the command line (see :mod:`echomq.cli`)."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
