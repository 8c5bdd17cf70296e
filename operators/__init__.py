"""ddflow engine: times, frontiers, batches, arrangements and differential operators."""
