"""Client services that outlive one call: the producer (every enqueue's one path: the
argument binding, the trio coalescer), and the waiters' core under the trio, asyncio and
blocking result loops."""
