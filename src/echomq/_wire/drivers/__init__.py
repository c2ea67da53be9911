"""Other drivers of the verbs' connection interface: redis.asyncio (``aio``) and redis-py
(``blocking``, with ``redispy``'s error translation)."""
