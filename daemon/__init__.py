"""ddflow daemon: Kafka sources and sinks, progress, metrics, the command line."""
