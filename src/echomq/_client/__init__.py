"""Client services that outlive one call: the enqueue coalescer and the result waiters
(trio and asyncio) over one waiter core."""
