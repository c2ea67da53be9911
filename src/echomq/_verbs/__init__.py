"""The verbs' implementations, one module per concern; ``echomq.jobs`` re-exports them."""
