"""An output: which collection a sink publishes, to which topic, in which format.

`OutputSpec` is checked when it is made: a bad name, topic or batch size raises `OptionsError`
naming the output, and its ``encoder`` (`ddflow.daemon.formats`) is built then, so a bad format
option fails here too and a sink may use ``spec.encoder`` without checking anything again. Specs
compare by identity (``eq=False``) and never change (``frozen``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..exceptions import OptionsError
from ..formats import encoder
from ..formats.types import Encoder

__all__ = ["OutputSpec"]


@dataclass(frozen=True, eq=False)
class OutputSpec:
    """One output: the dataflow collection ``name`` published to ``topic`` in ``format``
    (``msgpack``, ``json`` or ``debezium``). The json and debezium formats take the record's
    ``fields`` (names, or name -> type), its ``key`` fields (default: the first), the companion
    ``progress_topic``, ``schemas`` (Kafka Connect's schema/payload wrapper), ``partitioner``
    (``ddflow`` or Kafka's ``murmur2``), the json ``mode`` (``changelog`` or ``upsert``) and the
    debezium ``tombstones`` and ``source`` (its source block's ``name`` and ``db``); see `formats`."""

    name: str
    topic: str
    max_batch_updates: int = 5000
    format: str = "msgpack"
    fields: Sequence[str] | Mapping[str, str] | None = None
    key: Sequence[str] | None = None
    progress_topic: str | None = None
    schemas: bool = False
    partitioner: str = "ddflow"
    mode: str = "changelog"
    tombstones: bool = True
    source: Mapping[str, str] | None = None
    encoder: Encoder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OptionsError(f"output name: expected a non-empty string, got {self.name!r}")
        if not isinstance(self.topic, str) or not self.topic:
            raise OptionsError(f"output {self.name!r} topic: expected a non-empty string, got {self.topic!r}")
        if type(self.max_batch_updates) is not int or self.max_batch_updates <= 0:
            raise OptionsError(
                f"output {self.name!r} max_batch_updates: expected a positive int, got {self.max_batch_updates!r}"
            )
        made = encoder(self.format, self.name, self.topic, fields=self.fields, key=self.key,
                       progress_topic=self.progress_topic, schemas=self.schemas,
                       max_batch_updates=self.max_batch_updates, partitioner=self.partitioner, mode=self.mode,
                       tombstones=self.tombstones, source=self.source)
        object.__setattr__(self, "encoder", made)
