"""Writing outputs to Kafka: the sink and its commit window.

`sink.KafkaSink` (the worker's `io.Sink` over Kafka) encodes each epoch's output updates with the
output's encoder (`ddflow.daemon.formats`), writes them with the progress markers and dead letters
in Kafka transactions, and commits them with the consumed input offsets (`commits`).

May import: `exceptions`, `block`, `durable`, `formats`, `observe`, `kafka`, `deadletter`, `io`,
`input`, and `ddflow.operators`/`ddflow.config`; never `state`, the worker or anything above.
"""
