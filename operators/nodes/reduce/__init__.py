"""Reduce: the node, the reduction logics, and the tactics that evaluate them."""
