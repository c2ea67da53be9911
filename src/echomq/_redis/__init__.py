"""The Redis layer: the wire, the key builder, the scripts and their reply table."""
