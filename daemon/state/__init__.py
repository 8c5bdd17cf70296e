"""The worker's durable state: snapshots, checkpoints, recovery and backfills.

A `snapshot` is a directory of Parquet shard files (`shards`: records as columns, placed by the
engine's key hash) and a manifest (`manifest`: what it holds, under its own checksum); a
`checkpoint` is a snapshot of the worker's inputs at an epoch boundary; `recovery` restores the
newest valid checkpoint (with the inputs' floors and reclock bindings) and replays the inputs from
its offsets; `backfill` writes a snapshot from an archive (`archive`: its Parquet files read and
checked) with Spark, for a worker to start from.

May import: `exceptions`, `block`, `durable`, `formats`, `observe`, `kafka`, `deadletter`, `io`,
`input`, `output`, and `ddflow.operators`/`ddflow.config`; never the worker or anything above.
"""
