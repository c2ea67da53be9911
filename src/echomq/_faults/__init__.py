"""The fault kit behind ``echomq.testing``: faults for chaos tests, in users' suites and ours.

    worker_process.py   a worker in a child process: start (observed), stop, SIGKILL
    renewal.py          freeze / thaw a worker's lease keeper (in-process or child)
    waiting.py          wait until a job is running (its row is active)
    server.py           crash, drop or freeze a private redis-server
    proxy.py            FaultProxy: a TCP proxy that cuts, refuses or delays connections

Everything here waits on observable state (a log line, a row, a counter), never on time.
Production code never imports this package.
"""
