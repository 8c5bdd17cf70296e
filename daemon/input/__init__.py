"""Reading inputs from Kafka: the source and what it keeps per input and partition.

`source.KafkaSource` (the worker's `io.Source` over Kafka) polls the input partitions through its
`consumer` and its `intake`, reads only those that can move the frontier when the worker is full
(`pacing`), decodes with each input's decoder (`inputs.InputSpec`, built from
`ddflow.daemon.formats`), holds updates back by the epoch policy and the input frontiers
(`progress`), stamps reclocked inputs (`reclock`), keeps the floors below which a partition's
updates are settled (`floors`), and advances or dead-letters late updates and dead-letters what it
cannot read (`rejects`); `stalls` says which partition holds the output frontier back when it
stops moving.

May import: `exceptions`, `block`, `durable`, `formats`, `observe`, `kafka`, `deadletter`, `io`,
and `ddflow.operators`/`ddflow.config`; never `output`, `state`, the worker or anything above.
"""
