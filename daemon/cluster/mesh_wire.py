"""The mesh's messages on the wire: raw column frames, and a decoder that refuses what is not one.

Every message between two workers of a mesh (`ddflow.daemon.cluster.mesh`) is one ZeroMQ multipart
message whose first frame is a fixed little-endian header (`HEADER`, then ``rounds`` int64s):

    magic "ddfm", version, kind, source, dest, channel, seq, lower, upper, flags, rounds, count,
    depth, form, run, first, incarnation, ballot

``run`` is a 64-bit token of the run's name (`run_token`): a message of another run is foreign and
refused; ``incarnation``: a random number per sender process (a receiver takes only messages of the
incarnation that said hello to it). ``flags``: bit 0 set when ``lower`` is None, bit 1 when ``upper``
is, bit 2 (``ENDS``) when a batch is also its step's marker. The kinds and their further frames:

* ``HELLO`` (start-up barrier) — no further frame; ``count`` 1: the sender has not heard the
  receiver's hello yet and asks for it (an answer has ``count`` 0).
* ``BEAT`` (heartbeat) — none.
* ``BATCH`` ``count`` updates of exchange step ``(channel, seq)``: a records frame, ``times``
  (``count x depth`` int64) and ``diffs`` (``count`` int64), then for ``form == CODES`` a frame of the
  values first sent in this batch. Records travel by ``form``: ``INTS`` one int64 column, ``PAIRS``
  ``count x 2`` int64 (records that are ints or pairs of ints; no Python object per record), or
  ``CODES``: one int64 code per record, a code naming the value the sender first sent to this
  receiver under it. Codes are handed out in order, ``first`` is the first code this batch
  introduces, and the last frame holds the new values (msgpack, arrays read back as tuples): every
  value crosses to a receiver once. With ``ENDS`` set the batch is the last of its step from its
  sender, whose marker it stands for (the step's count: this batch's and the earlier ones'), so a
  step that sends updates to a worker costs one message, not two.
* ``MARKER`` the end of exchange step ``(channel, seq)``; ``count`` updates were sent in it.
  ``ballot`` (a marker's, or a batch's with ``ENDS``): the sender's ballot for a loop's next round
  (``ddflow.operators.transport``: -2 none, -1 no work, else the least round it has work at).
* ``VOTE`` agreement ``seq``: one frame, the msgpack of the sender's value.

`decode` checks every field against what the receiver expects (its run, its index, the worker
count, frame sizes matching ``count`` and ``depth``, codes inside the sender's table) and raises
`MeshMessageError` naming the connection the message came from and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ...operators.transport import ABSTAIN
from ..exceptions import DaemonError
from ..formats.types import to_record

__all__ = ["BATCH", "BEAT", "CODES", "ENDS", "HELLO", "INTS", "MARKER", "PAIRS", "VOTE", "Message", "MeshMessageError", "peek",
           "decode", "header", "run_token"]

MAGIC, VERSION = b"ddfm", 3
HELLO, BEAT, BATCH, MARKER, VOTE = 1, 2, 3, 4, 5
INTS, PAIRS, CODES = 0, 1, 2
KINDS = {HELLO: "hello", BEAT: "heartbeat", BATCH: "batch", MARKER: "marker", VOTE: "vote"}
FRAMES = {HELLO: 1, BEAT: 1, MARKER: 1, VOTE: 2}  # BATCH: 4, or 5 with CODES
HEADER = struct.Struct("<4sBBHHiqqqBBqBBqqqq")
ENDS = 4  # flags: the batch ends its step
MAX_ROUNDS = 64


class MeshMessageError(DaemonError):
    """A message on the mesh that is malformed or belongs to another run (names its sender)."""


def run_token(run: str) -> int:
    """The run's name as the signed 64-bit token every message carries."""
    return int.from_bytes(hashlib.blake2b(run.encode(), digest_size=8).digest(), "little", signed=True)


def header(kind: int, source: int, dest: int, run: int, *, channel: int = 0, seq: int = 0,
           lower: int | None = None, upper: int | None = None, rounds: tuple[int, ...] = (), count: int = 0,
           depth: int = 0, form: int = 0, first: int = 0, incarnation: int = 0, ends: bool = False,
           ballot: int = ABSTAIN) -> bytes:
    """The first frame of a message (see the module); ``ends``: a batch that is its step's marker."""
    flags = (lower is None) | ((upper is None) << 1) | (ENDS if ends else 0)
    head = HEADER.pack(MAGIC, VERSION, kind, source, dest, channel, seq, lower or 0, upper or 0, flags,
                       len(rounds), count, depth, form, run, first, incarnation, ballot)
    return head + struct.pack(f"<{len(rounds)}q", *rounds) if rounds else head


@dataclass
class Message:
    """One decoded message. For a batch, ``records`` is an int64 column, an ``(n, 2)`` int64 array,
    or (``CODES``) the codes, with ``values`` the values first sent in it; arrays are read-only views
    of the received frames; ``ends``: the batch is also its step's marker; ``ballot``: a marker's (or
    such a batch's) ballot, ``ABSTAIN`` for none."""

    kind: int
    source: int
    channel: int
    seq: int
    lower: int | None
    upper: int | None
    rounds: tuple[int, ...]
    count: int
    form: int = INTS
    first: int = 0
    incarnation: int = 0
    ends: bool = False
    records: np.ndarray | None = None
    times: np.ndarray | None = None
    diffs: np.ndarray | None = None
    values: list | None = None
    vote: Any = None
    ballot: int = ABSTAIN


def _column(frame: memoryview, rows: int, width: int, what: str, fail) -> np.ndarray:
    if len(frame) != rows * width * 8:
        fail(f"its {what} frame holds {len(frame)} bytes, not {rows} x {width} int64")
    column = np.frombuffer(frame, dtype="<i8")
    return column.reshape(rows, width) if width != 1 or what == "times" else column


def peek(frame: Any) -> tuple[int, int] | None:
    """``(kind, incarnation)`` from a message's first frame, unchecked (None when it is too short
    to hold a header: `decode` says why)."""
    head = memoryview(frame)
    if len(head) < HEADER.size:
        return None
    fields = HEADER.unpack_from(head)
    return fields[2], fields[16]


def decode(frames: list, *, sender: str, me: int, workers: int, run: int, codes: int = 0) -> Message:
    """The message ``frames`` (buffers) as a `Message`, or `MeshMessageError` naming ``sender`` (the
    connection it came from). ``me``: the receiving worker, ``run``: the receiver's run token,
    ``codes``: how many codes the sender has introduced to this receiver so far."""

    def fail(why: str):
        raise MeshMessageError(f"mesh: refused a message from {sender} at worker {me}: {why}")

    if not frames:
        fail("it is empty")
    head = memoryview(frames[0])
    if len(head) >= len(MAGIC) + 1 and bytes(head[: len(MAGIC)]) == MAGIC and head[len(MAGIC)] != VERSION:
        # (before the size: another version's header may be shorter or longer)
        fail(f"protocol version {head[len(MAGIC)]}, this worker speaks {VERSION}")
    if len(head) < HEADER.size:
        fail(f"its header holds {len(head)} bytes, fewer than {HEADER.size} (not a ddflow mesh message)")
    (magic, version, kind, source, dest, channel, seq, lower, upper, flags, nrounds, count, depth, form, token,
     first, incarnation, ballot) = HEADER.unpack_from(head)
    if magic != MAGIC:
        fail(f"it does not start with {MAGIC!r} (not a ddflow mesh message)")
    if token != run:
        fail(f"it belongs to another run (token {token:#x}, this run's is {run:#x})")
    if kind not in KINDS:
        fail(f"unknown kind {kind}")
    if not 0 <= source < workers or source == me:
        fail(f"source worker {source} is not another worker of {workers}")
    if dest != me:
        fail(f"it is addressed to worker {dest}")
    if nrounds > MAX_ROUNDS or len(head) != HEADER.size + 8 * nrounds:
        fail(f"its header holds {len(head)} bytes for {nrounds} loop rounds")
    rounds = struct.unpack_from(f"<{nrounds}q", head, HEADER.size) if nrounds else ()
    want = FRAMES.get(kind) or (5 if form == CODES else 4)
    if len(frames) != want:
        fail(f"a {KINDS[kind]} of {len(frames)} frames, not {want}")
    if count < 0 or seq < 0 or channel < 0:
        fail(f"negative count, seq or channel ({count}, {seq}, {channel})")
    if ballot < ABSTAIN:
        fail(f"ballot {ballot}")
    msg = Message(kind, source, channel, seq, None if flags & 1 else lower, None if flags & 2 else upper,
                  tuple(rounds), count, form, first, incarnation, kind == BATCH and bool(flags & ENDS),
                  ballot=ballot)
    if kind == VOTE:
        try:
            msg.vote = msgpack.unpackb(frames[1], raw=False, use_list=True, strict_map_key=False)
        except Exception as exc:
            fail(f"vote {seq} is not msgpack ({exc})")
    elif kind == BATCH:
        if form not in (INTS, PAIRS, CODES):
            fail(f"unknown record form {form}")
        if not 1 <= depth <= MAX_ROUNDS + 1:
            fail(f"time depth {depth}")
        msg.records = _column(memoryview(frames[1]), count, 2 if form == PAIRS else 1, "records", fail)
        msg.times = _column(memoryview(frames[2]), count, depth, "times", fail)
        msg.diffs = _column(memoryview(frames[3]), count, 1, "diffs", fail)
        if form == CODES:
            if first != codes:
                fail(f"its new values start at code {first}, but {codes} codes were introduced so far")
            try:
                values = msgpack.unpackb(frames[4], raw=False, use_list=True, strict_map_key=False)
            except Exception as exc:
                fail(f"its new values are not msgpack ({exc})")
            if not isinstance(values, list):
                fail("its new values are not a list")
            msg.values = [to_record(v) for v in values]
            known = codes + len(msg.values)
            if count and (int(msg.records.min()) < 0 or int(msg.records.max()) >= known):
                fail(f"a record code outside the {known} values it introduced")
    return msg
