"""The Trio runtime: the worker, its loops, and the per-job cancel scopes."""
