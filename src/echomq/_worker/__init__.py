"""The Trio runtime: the worker, its loops, and the slot pool that runs the jobs."""
