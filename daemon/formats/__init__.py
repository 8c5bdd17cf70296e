"""Wire formats of input and output topics: one decoder and one encoder per format.

Formats are pure: bytes in -> validated updates (or, per bad update, a `types.Malformed` with one
of `types.REASONS`) out; updates out -> Kafka messages (topic, partition, key, value, headers).
No Kafka client is touched here; the source decodes with an input's `Decoder`, the sink encodes
with an output's `Encoder`, and the result client reads an output back with its `Reader`.

* ``msgpack`` (the default): ddflow's own format: inputs in `msgpack`, result topics in
  `result_protocol`, its compiled codec kernels in `kernels`.
* ``json``: an update ``[data, time_ns, diff]`` or an object with the declared field names plus
  ``time`` and ``diff``, a batch of either, or a progress marker ``{"progress": time_ns}``.
* ``debezium``: Debezium's JSON change-event envelope (with or without Kafka Connect's
  ``schema``/``payload`` wrapper): ``c``/``r`` insert ``after``, ``d`` retracts ``before``, ``u``
  retracts ``before`` and inserts ``after``, at the event's ``ts_ns``/``ts_us``/``ts_ms``.

On json/debezium outputs the data topic holds only change events (one per message, keyed by the
record's key fields, tagged with their epoch in a header), and the epoch's progress markers go to
a companion progress topic (`Encoder.progress_topic`).

Modules: `types` (the format-neutral `Decoded`, `Malformed`, `REASONS` and the `Decoder`/`Encoder`/
`Reader` protocols), `schema` (`InputFormat`: how records are validated), one module per format,
`rows` (what the JSON-based formats share), `epochs` (their epochs' header and markers). This package may import only `ddflow.operators` (its
key hash, time bounds and `RecordColumns`), `..block` and `..exceptions`: it is the bottom of the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..exceptions import OptionsError
from .schema import InputFormat
from .types import Decoder, Encoder, Message, Reader, Update

__all__ = [
    "FORMATS",
    "TIME_SOURCES",
    "Update",
    "Message",
    "Decoder",
    "Encoder",
    "Reader",
    "decoder",
    "encoder",
    "reader",
]

FORMATS = ("msgpack", "json", "debezium")
TIME_SOURCES = ("envelope", "source")  # where a Debezium event's time is read


def decoder(
    format: str, fields: InputFormat, *, time_source: str = "envelope", time_required: bool = True
) -> Decoder:
    """The decoder of an input in ``format``; ``fields`` validates the records (and carries
    ``max_message_bytes``); ``time_source``: the Debezium envelope's or its ``source``'s time."""
    if format == "msgpack":
        from .msgpack import MsgpackDecoder

        return MsgpackDecoder(fields)
    if format == "json":
        from .json import JsonDecoder

        return JsonDecoder(fields)
    if format == "debezium":
        from .debezium import DebeziumDecoder

        if time_source not in TIME_SOURCES:
            raise OptionsError(f"debezium time: {time_source!r} is not one of {', '.join(TIME_SOURCES)}")
        return DebeziumDecoder(fields, time_source=time_source, time_required=time_required)
    raise OptionsError(f"input format: {format!r} is not one of {', '.join(FORMATS)}")


def encoder(
    format: str,
    name: str,
    topic: str,
    *,
    fields: Sequence[str] | Mapping[str, str] | None = None,
    key: Sequence[str] | None = None,
    progress_topic: str | None = None,
    schemas: bool = False,
    max_batch_updates: int = 5000,
    partitioner: str = "ddflow",
    mode: str = "changelog",
    tombstones: bool = True,
    source: Mapping[str, str] | None = None,
) -> Encoder:
    """The encoder of output ``name`` on ``topic`` in ``format`` (see the format modules for
    what ``fields``, ``key``, ``progress_topic``, ``schemas``, ``partitioner`` (`partitioners`),
    ``mode`` (json), ``tombstones`` and ``source`` (debezium) mean there)."""
    if format == "msgpack":
        from .result_protocol import MsgpackEncoder

        for option, given in (("fields", fields), ("key", key), ("progress_topic", progress_topic),
                              ("schemas", schemas), ("partitioner", partitioner != "ddflow"),
                              ("mode", mode != "changelog")):
            if given:
                raise OptionsError(f"output {name!r} {option}: only the json and debezium formats use it")
        return MsgpackEncoder(name, topic, max_batch_updates=max_batch_updates)
    if format != "debezium" and not tombstones:
        raise OptionsError(f"output {name!r} tombstones: only the debezium format uses it")
    if format != "json" and mode != "changelog":
        raise OptionsError(f"output {name!r} mode: only the json format has modes")
    if format in ("json", "debezium"):
        from .rows import RowLayout

        if not progress_topic:
            raise OptionsError(f"output {name!r} progress_topic: a {format} output needs a companion progress topic")
        if progress_topic == topic:
            raise OptionsError(f"output {name!r} progress_topic: {topic!r} is the data topic itself")
        layout = RowLayout(name, topic, fields, key, schemas=schemas, format=format, partitioner=partitioner)
        if format == "json":
            from .json import JsonEncoder

            return JsonEncoder(layout, progress_topic, mode=mode)
        from .debezium import DebeziumEncoder

        return DebeziumEncoder(layout, progress_topic, source=source, tombstones=tombstones)
    raise OptionsError(f"output {name!r} format: {format!r} is not one of {', '.join(FORMATS)}")


def reader(format: str, fields: Sequence[str] | Mapping[str, str] | None = None) -> Reader:
    """How a result client reads the data messages of an output in ``format``; ``fields``: the
    record's field names in order (None: the order of each object's keys), typed to turn base64
    strings back into bytes."""
    if format == "json":
        from .json import JsonReader

        return JsonReader(fields)
    if format == "debezium":
        from .debezium import DebeziumReader

        return DebeziumReader(fields)
    raise OptionsError(f"result reader format: {format!r} is not one of json, debezium (msgpack outputs carry "
                       "their epochs in the data topic)")
