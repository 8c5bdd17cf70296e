"""Writing outputs to Kafka: the sink and its commit window.

`sink.KafkaSink` (the worker's `io.Sink` over Kafka) encodes each epoch's output updates with the
output's encoder (`outputs.OutputSpec`, built from `ddflow.daemon.formats`), gathers them in its
commit window (`commits`), and writes them with the progress markers, dead letters and consumed
input offsets in Kafka transactions, or idempotently without them (`transactions`).

May import: `exceptions`, `block`, `durable`, `formats`, `observe`, `kafka`, `deadletter`, `io`,
`input`, and `ddflow.operators`/`ddflow.config`; never `state`, the worker or anything above.
"""
