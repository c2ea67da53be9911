"""The scripts: the Lua transitions (``lua/``), their loader and calls, the reply table and
the key builder. The verbs are the only callers."""
