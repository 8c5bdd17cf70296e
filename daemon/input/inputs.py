"""One input of a worker: the dataflow input it feeds, its topic, and how its messages are read.

An `InputSpec` says where an input's updates come from and how to read them: the declared
``fields`` (names, or name -> type, each record validated against them), the message ``format``
(`formats`: msgpack, json, debezium), the progress ``policy`` and what to do with late updates
(`progress`), and a size limit per message. Building one checks every option and builds the
decoder its source reads with, so a bad combination is refused before anything connects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..exceptions import OptionsError
from ..formats import decoder
from ..formats.schema import InputFormat
from ..formats.types import Decoder
from .progress import LATE_POLICIES, POLICIES

__all__ = ["InputSpec"]


@dataclass(frozen=True, eq=False)
class InputSpec:
    """One input: the dataflow input ``name`` fed from ``topic``.

    ``fields``: names (or name -> type) of the data fields, None for any data; ``policy``: one of
    ``explicit``, ``monotonic``, ``reclock``; ``late``: ``advance`` or ``reject``;
    ``idle_timeout``: seconds (monotonic only); ``max_message_bytes``: larger messages are
    dead-lettered as ``oversized``; ``format``: ``msgpack``, ``json`` or ``debezium`` (see
    `formats`; debezium sends no progress markers, so its policy is ``monotonic`` or
    ``reclock``); ``time_source``: where a Debezium event's time is read (``envelope`` or
    ``source``). ``records`` validates the records and ``decoder`` reads the messages.
    """

    name: str
    topic: str
    fields: Sequence[str] | Mapping[str, str] | None = None
    policy: str = "explicit"
    late: str = "advance"
    idle_timeout: float | None = None
    max_message_bytes: int = 1 << 20
    format: str = "msgpack"
    time_source: str = "envelope"
    records: InputFormat = field(init=False, repr=False)
    decoder: Decoder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        where = f"input {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise OptionsError(f"input name: expected a non-empty string, got {self.name!r}")
        if not isinstance(self.topic, str) or not self.topic:
            raise OptionsError(f"{where} topic: expected a non-empty string, got {self.topic!r}")
        if self.policy not in POLICIES:
            raise OptionsError(f"{where} policy: {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.late not in LATE_POLICIES:
            raise OptionsError(f"{where} late: {self.late!r} is not one of {', '.join(LATE_POLICIES)}")
        if self.idle_timeout is not None and self.policy != "monotonic":
            raise OptionsError(f"{where} idle_timeout: only the 'monotonic' policy uses it (policy is {self.policy!r})")
        if self.format == "debezium" and self.policy == "explicit":
            raise OptionsError(f"{where} policy: a debezium input has no progress markers; use 'monotonic' or 'reclock'")
        try:
            fmt = InputFormat(self.fields, self.max_message_bytes, time_required=self.policy != "reclock")
            made = decoder(self.format, fmt, time_source=self.time_source, time_required=fmt.time_required)
        except OptionsError as exc:
            raise OptionsError(f"{where}: {exc}") from exc
        object.__setattr__(self, "records", fmt)
        object.__setattr__(self, "decoder", made)
