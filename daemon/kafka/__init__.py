"""Kafka plumbing and clients: what talks to a broker without being the data path.

`client` (configs, bounded blocking calls, metadata and topic creation), `logs` (librdkafka's
log lines through Python logging, deduplicated), `topics` (watching the
input topics for changes), `broker` (the embedded tansu broker), `producer` (`UpdateProducer`,
writing input updates), `results`, `following`, `companion` and `reading` (`ResultClient`, reading a result
topic back into final times), `positions` (where a restarting daemon's result topics stand).

May import: `exceptions`, `formats` and `ddflow.operators`/`ddflow.config` only; never the data
path (`input`, `output`, `state`, the worker).
"""
