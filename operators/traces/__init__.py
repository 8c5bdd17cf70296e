"""Traces: collections of keyed updates indexed by key (batches, tries, spines, reader handles, cursors)."""
