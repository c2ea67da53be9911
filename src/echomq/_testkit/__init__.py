"""The test kit behind ``echomq.testing`` and ``echomq demo``: private servers, faults for
chaos tests, and the demo.

    redis_server.py     a private redis-server child on a free loopback port
    redis_cluster.py    a private Redis Cluster of such children
    postgres_server.py  a private PostgreSQL cluster (initdb) for the archive
    server_process.py   what the private servers share: a port, a directory, a process
    lifeline.py         a server this process started ends when this process ends
    worker_process.py   a worker in a child process: start (observed), stop, SIGKILL
    lease_freeze.py     freeze / thaw a worker's lease keeper (in-process or child)
    waiting.py          wait until a job is running (its row is active)
    server_faults.py    crash, drop or freeze a private redis-server
    fault_proxy.py      FaultProxy: a TCP proxy that cuts, refuses or delays connections
    demo.py             ``echomq demo``: a worker, a producer and the dashboard

Everything here waits on observable state (a log line, a row, a counter), never on time.
The queue's own code (the worker, the verbs, the client) never imports this package.
"""
