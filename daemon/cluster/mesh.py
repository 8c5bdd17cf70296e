"""The mesh: the engine's worker transport (`ddflow.operators.transport.Transport`) over direct
ZeroMQ connections between the workers, within a host (``ipc://``) or across hosts (``tcp://``),
which `ddflow.daemon.cluster.mesh_peers` keeps: who is there and alive, and what arrived from whom.

Between two workers messages keep their order, which is all the exchange protocol needs: a step's
batches come before its marker, and a step's last batch to a worker is its marker too (one message
per step and worker). Updates cross as raw int64 column frames sent without a copy; records that
are not ints or pairs of ints cross as codes, each distinct value once per receiver
(`mesh_wire`). Agreements (the common clock, the least loop round, whether any worker has work)
are votes on the same connections. ``sent_bytes``/``received_bytes``: frame bytes of updates
(records, times, diffs, new values) sent/received; ``steps``: exchange steps received.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
import zmq

from ...operators.transport import ABSTAIN, ExchangeBatch, ExchangeMarker
from . import mesh_wire as wire
from .mesh_peers import Interrupted, MeshError, MeshPeers, MeshTimeout, PeerLost, listen_address

__all__ = ["Interrupted", "MeshError", "MeshTimeout", "MeshTransport", "PeerLost", "listen_address"]

_SNDMORE = int(zmq.SNDMORE)  # a plain int: pyzmq's enum members cost an enum operation at every use


class MeshTransport(MeshPeers):
    """Worker ``index``'s end of a mesh of ``len(addresses)`` workers (see the module; the options
    are `MeshPeers`'s)."""

    def __init__(self, addresses: Sequence[str], index: int, **options: Any) -> None:
        super().__init__(addresses, index, **options)
        self._held: dict[int, tuple[ExchangeBatch, list, int, int]] = {}  # per worker: a batch not sent yet
        self._codes_out: dict[int, dict[Any, int]] = {p: {} for p in self._peers}
        self.sent_bytes = self.steps = self.agreements = 0  # so far: bytes of update frames, exchange steps, agreements
        self._ballots: list[int] = []  # the ballots of the last step received

    def send(self, batch: ExchangeBatch) -> None:
        self.start()
        records, n = batch.records, len(batch.diffs)
        first, extra = 0, []
        if isinstance(records, np.ndarray):
            form = wire.PAIRS if records.ndim == 2 else wire.INTS
            column = np.ascontiguousarray(records, dtype="<i8")
        else:
            form, table = wire.CODES, self._codes_out[batch.dest]
            first = len(table)
            column = np.empty(n, dtype="<i8")
            new = []
            for i, value in enumerate(records):
                code = table.get(value)
                if code is None:
                    code = table[value] = len(table)
                    new.append(value)
                column[i] = code
            try:
                extra = [msgpack.packb(new, use_bin_type=True)]
            except (TypeError, ValueError) as exc:
                raise MeshError(f"mesh: exchange {batch.channel} cannot send a record to worker {batch.dest}: "
                                f"{exc} (records crossing workers are ints, floats, strings, bytes, bools, "
                                f"None and tuples of them)") from exc
        times = np.ascontiguousarray(batch.times, dtype="<i8")
        diffs = np.ascontiguousarray(batch.diffs, dtype="<i8")
        self._flush(batch.dest, False)
        self._held[batch.dest] = (batch, [column, times, diffs, *extra], form, first)
        self.sent_bytes += column.nbytes + times.nbytes + diffs.nbytes + sum(len(e) for e in extra)

    def mark(self, marker: ExchangeMarker) -> None:
        self.start()
        held = self._held.get(marker.dest)
        if held is not None and held[0].channel == marker.channel and held[0].seq == marker.seq:
            self._flush(marker.dest, True, marker.ballot)  # the step's last batch carries its marker
            return
        self._flush(marker.dest, False)
        self._dealers[marker.dest].send(self._head(
            wire.MARKER, marker.dest, channel=marker.channel, seq=marker.seq, lower=marker.lower,
            upper=marker.upper, rounds=marker.rounds, count=marker.count, ballot=marker.ballot))

    def _flush(self, dest: int, ends: bool, ballot: int = ABSTAIN) -> None:
        """Send the batch held for ``dest`` (if any); ``ends``: it is its step's marker too (with the
        marker's ``ballot``). A batch is held until the next message to its worker, so the last of a
        step rides with the marker."""
        held = self._held.pop(dest, None)
        if held is None:
            return
        batch, frames, form, first = held
        head = self._head(wire.BATCH, dest, channel=batch.channel, seq=batch.seq, lower=batch.lower,
                          upper=batch.upper, rounds=batch.rounds, count=len(frames[2]), depth=frames[1].shape[1],
                          form=form, first=first, ends=ends, ballot=ballot)
        dealer = self._dealers[dest]
        dealer.send(head, _SNDMORE)
        for frame in frames[:-1]:
            dealer.send(frame, _SNDMORE, copy=False)
        dealer.send(frames[-1], 0, copy=False)

    def receive(self, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
        self.start()
        box = self._boxes.setdefault((channel, seq), ([], {}))
        self._wait(lambda: len(box[1]) == len(self._peers),
                   lambda: [p for p in self._peers if p not in box[1]], f"exchange {channel} step {seq}")
        del self._boxes[(channel, seq)]
        self.steps += 1
        batches, markers = box
        self._ballots = [markers[p].ballot for p in sorted(markers)]
        got: dict[int, int] = {}
        for m in batches:
            got[m.source] = got.get(m.source, 0) + m.count
        facts = {(m.lower, m.upper, m.rounds) for m in markers.values()}
        for source, marker in markers.items():
            if not marker.ends and got.get(source, 0) != marker.count:  # a batch that ends a step counts itself
                raise MeshError(f"mesh: exchange {channel} step {seq}: {self.name(source)} marked {marker.count} "
                                f"updates but sent {got.get(source, 0)}")
        if len(facts) > 1:
            raise MeshError(f"mesh: exchange {channel} step {seq}: workers are at different epochs or rounds: "
                            f"{sorted(facts, key=repr)}")
        out = []
        for m in sorted(batches, key=lambda m: m.source):
            records: list | np.ndarray = m.records
            if m.form == wire.CODES:
                table = self._codes_in[m.source]
                records = [table[c] for c in m.records.tolist()]
            out.append(ExchangeBatch(channel, seq, m.source, worker, m.lower, m.upper, m.rounds, records,
                                     m.times, m.diffs))
        return out

    def ballots(self, worker: int) -> list[int]:
        return self._ballots

    def gather(self, worker: int, seq: int, value: Any) -> list[Any]:
        self.start()
        self.agreements += 1
        packed = msgpack.packb(value, use_bin_type=True)
        for p in self._peers:
            self._flush(p, False)  # a batch still held goes first: messages to a worker keep their order
            self._dealers[p].send_multipart([self._head(wire.VOTE, p, seq=seq), packed])
        votes = self._votes.setdefault(seq, {})
        votes[self.index] = msgpack.unpackb(packed, raw=False, use_list=True, strict_map_key=False)
        self._wait(lambda: len(votes) == self.workers, lambda: [p for p in self._peers if p not in votes],
                   f"agreement {seq}")
        del self._votes[seq]
        return [votes[i] for i in range(self.workers)]

    def voted(self, seq: int) -> bool:
        """Whether some other worker has voted in agreement ``seq`` by now (no waiting; a daemon
        worker asks between epochs, so a peer lost while no exchange waits is found here too)."""
        self.start()
        self._poll(0)
        self._check_peers(time.monotonic())
        return bool(self._votes.get(seq))
