"""Private redis-server processes: one server (``single``) or a cluster of them (``cluster``);
and a private PostgreSQL server (``postgres``) for the archive's tests and benchmarks.

Production code (the demo, the dashboard's embedded mode) and ``echomq.testing`` both
build on these modules; nothing here imports ``echomq.testing``.
"""
