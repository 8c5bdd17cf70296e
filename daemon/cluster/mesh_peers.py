"""The mesh's connections: worker ``index``'s sockets to every other worker of a run, who is there and
alive, and what has arrived from them, filed by exchange step and agreement
(`MeshPeers`; the transport over them is `ddflow.daemon.cluster.mesh.MeshTransport`).

Worker ``i`` of ``W`` listens at ``addresses[i]`` (a ROUTER socket; ``tcp://name:port`` listens on
every interface at ``port``) and connects one DEALER socket to every other worker's address, whose
ZeroMQ identity is ``w{i}``: so every message names the connection it came from, and a message whose
header claims another source is refused (`mesh_wire.decode`). Between two workers messages keep
their order (one connection each way).

**Membership.** The first exchange or agreement starts the mesh (or `start()`): every worker sends
a hello to every other and waits until it has one from each, at most ``start_timeout`` seconds
(`MeshTimeout` names the workers and addresses that never answered), saying hello again every
``HELLO_AGAIN_S`` to the peers it still misses, asking for theirs. A started worker answers such a
hello, and the first hello of a peer's incarnation, with its own: its earlier one may have reached
an earlier incarnation of that peer, or gone into a connection to it that had died (restarted since,
all workers restarting one after another); what a peer sends
before its hello reached this worker waits for that hello. A background thread sends a
heartbeat to every peer every ``heartbeat`` seconds (on its own connections, so a worker busy in a
long epoch still beats); a worker waiting in an exchange or agreement that has heard nothing from
a peer for ``peer_timeout`` seconds raises `PeerLost` naming it and its address (``lost``: the
names of the peers declared lost, for logs; ``peers_lost``: their indexes, for metrics and
readiness; ``peer_addresses``: every other worker by index). A second hello from a peer (it
restarted: its part of the state is gone) is `PeerLost` too. The heartbeat thread needs the
interpreter lock: a peer that holds it longer than ``peer_timeout`` (compiling kernels, a long
compiled call) looks silent, so keep ``peer_timeout`` well above that (ZeroMQ's own heartbeats and
a socket monitor's disconnect events would not depend on it). There is no replay: a mesh run whose
worker fails is over, and recovery restarts every worker from a checkpoint they all completed.

**Waiting.** ``stop()``: when it returns True, a wait made while ``interruptible`` is set (the
start-up wait included) raises `Interrupted` (a daemon worker told to stop). A wait longer than
``slow`` seconds for peers that are alive is logged (a WARNING naming the step or agreement and the
peers). ``waited[j]``: seconds this worker spent blocked while worker ``j`` had not yet delivered its
part; ``waiting_on``: the workers it is blocked on now; ``received_bytes``: frame bytes of updates
received.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from ...operators.errors import TransportAborted
from ..exceptions import DaemonError
from . import mesh_wire as wire

__all__ = ["HELLO_AGAIN_S", "Interrupted", "MeshError", "MeshPeers", "MeshTimeout", "PeerLost", "listen_address"]

log = logging.getLogger("ddflow.daemon.cluster.mesh")

# plain ints: pyzmq's enum members cost an enum operation at every use
_EVENTS, _POLLIN, _RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
HELLO_AGAIN_S = 0.5  # a worker waiting at start-up says hello again this often to the peers it misses


class MeshError(DaemonError):
    """The mesh between the workers failed (a bad address, a peer gone)."""


class MeshTimeout(MeshError):
    """The workers did not all meet at start-up within ``start_timeout``."""


class PeerLost(MeshError):
    """A peer was silent for longer than ``peer_timeout``, or restarted: names it and its address."""


class Interrupted(TransportAborted):
    """A wait made while ``interruptible`` was set ended because ``stop()`` said so."""


def listen_address(address: str) -> str:
    """Where a worker whose address is ``address`` listens: ``tcp://HOST:PORT`` on every interface."""
    if address.startswith("tcp://"):
        _, sep, port = address[len("tcp://"):].rpartition(":")
        if not sep or not port.isdigit():
            raise MeshError(f"mesh address {address!r} has no port (tcp://HOST:PORT)")
        return f"tcp://*:{port}"
    if address.startswith(("ipc://", "inproc://")):
        return address
    raise MeshError(f"mesh address {address!r} is neither tcp://HOST:PORT nor ipc://PATH")


class MeshPeers:
    """Worker ``index``'s connections to the other workers of ``addresses`` (see the module): what
    arrives is filed into ``_boxes`` (per exchange step ``(channel, seq)``: its batches, and its
    markers by sender) and ``_votes`` (per agreement: the values by sender), where the transport
    takes it."""

    def __init__(self, addresses: Sequence[str], index: int, *, run: str, start_timeout: float = 60.0,
                 heartbeat: float = 0.5, peer_timeout: float = 10.0, slow: float = 30.0, stop: Callable[[], bool] | None = None,
                 context: zmq.Context | None = None) -> None:
        addresses = list(addresses)
        if not addresses or type(index) is not int or not 0 <= index < len(addresses):
            raise MeshError(f"mesh: worker {index!r} is not an index into {len(addresses)} addresses")
        self.addresses, self.index, self.workers, self.run = addresses, index, len(addresses), run
        self.start_timeout, self.heartbeat, self.peer_timeout = start_timeout, heartbeat, peer_timeout
        self.slow = slow
        self._token = wire.run_token(run)
        self._context = context or zmq.Context.instance()
        self._incarnation = int.from_bytes(os.urandom(7), "little")
        self._peers = [p for p in range(self.workers) if p != index]
        self._router = self._socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted peer's connection replaces its old one
        try:
            self._router.bind(listen_address(addresses[index]))
        except zmq.ZMQError as exc:
            self._router.close(0)
            raise MeshError(f"mesh: worker {index} cannot listen at {addresses[index]!r}: {exc}") from exc
        self._dealers = {p: self._dealer(p, b"") for p in self._peers}
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._boxes: dict[tuple[int, int], tuple[list[wire.Message], dict[int, wire.Message]]] = {}
        self._votes: dict[int, dict[int, Any]] = {}
        self._codes_in: dict[int, list] = {p: [] for p in self._peers}
        self._heard: dict[int, float] = {}
        self._hellos: dict[int, int] = {}
        # what a peer sent before its hello reached this worker (the hello went into a connection
        # that had died): filed once a hello of the same incarnation comes, dropped otherwise
        self._early: dict[int, list[tuple[int, list[bytes]]]] = {}
        self._error: BaseException | None = None
        self._started = False
        self._closed = threading.Event()
        self._beater: threading.Thread | None = None
        self.stop = stop or (lambda: False)
        self.interruptible = False
        self.waiting_since: float | None = None
        self.lost: list[str] = []
        self.peers_lost: set[int] = set()
        self.peer_addresses = {p: addresses[p] for p in self._peers}
        self.waited: dict[int, float] = {}
        self.waiting_on: tuple[int, ...] = ()
        self.received_bytes = 0

    def _head(self, kind: int, dest: int, **fields: Any) -> bytes:
        return wire.header(kind, self.index, dest, self._token, incarnation=self._incarnation, **fields)

    def _socket(self, kind: int) -> zmq.Socket:
        s = self._context.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        return s

    def _dealer(self, peer: int, suffix: bytes) -> zmq.Socket:
        s = self._socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, f"w{self.index}".encode() + suffix)
        s.connect(self.addresses[peer])
        return s

    def name(self, peer: int) -> str:
        """How logs name worker ``peer``: its index and address."""
        return f"worker {peer} ({self.addresses[peer]})"

    # -- membership --------------------------------------------------------------------------------

    def start(self) -> None:
        """Meet every other worker (see the module); a no-op once started."""
        if self._started:
            return
        self._started = True
        self._beater = threading.Thread(target=self._beat, name=f"mesh-heartbeat-{self.index}", daemon=True)
        self._beater.start()
        deadline = time.monotonic() + self.start_timeout
        asked = -float("inf")
        while len(self._hellos) < len(self._peers):
            missing = [p for p in self._peers if p not in self._hellos]
            if time.monotonic() - asked >= HELLO_AGAIN_S:  # again: one may have gone to a dead connection
                asked = time.monotonic()
                for p in missing:
                    self._dealers[p].send(self._head(wire.HELLO, p, count=1))
            if self.interruptible and self.stop():
                raise Interrupted(f"mesh: worker {self.index} stopped while waiting at start-up for "
                                  + ", ".join(self.name(p) for p in missing))
            if time.monotonic() > deadline:
                raise MeshTimeout(f"mesh: worker {self.index} waited {self.start_timeout:g} s at start-up for "
                                  + ", ".join(self.name(p) for p in missing))
            self._poll(0.05)
        now = time.monotonic()
        self._heard.update({p: max(self._heard.get(p, now), now) for p in self._peers})

    def _beat(self) -> None:
        dealers = {p: self._dealer(p, b"/beat") for p in self._peers}
        try:
            while not self._closed.wait(self.heartbeat):
                for p, s in dealers.items():
                    s.send(self._head(wire.BEAT, p))
        finally:
            for s in dealers.values():
                s.close(0)

    def abort(self, error: BaseException) -> None:
        self._error = error

    def close(self) -> None:
        """Stop the heartbeat and close the connections (what is not delivered yet is dropped)."""
        self._closed.set()
        if self._beater is not None:
            self._beater.join(5)
        for s in self._dealers.values():
            s.close(0)
        self._router.close(0)

    # -- waiting -----------------------------------------------------------------------------------

    def _wait(self, done, missing, what: str) -> None:
        """Until ``done()``; ``missing()``: the peers whose part has not come; ``what``: the exchange
        step or agreement, named in the WARNING logged once the wait passed ``slow`` seconds (peers
        that still beat but never send their part: a worker elsewhere in the common sequence)."""
        self._poll(0)  # what came while this worker was busy (heartbeats: peers are judged on them)
        now = time.monotonic()
        self.waiting_since = now
        warned = False
        try:
            while not done():
                if self._error is not None:
                    raise TransportAborted(f"another worker failed: {self._error!r}")
                blocked = tuple(missing())
                if self.interruptible and self.stop():
                    raise Interrupted(f"mesh: worker {self.index} stopped while waiting for workers {list(blocked)}")
                self.waiting_on = blocked
                self._check_peers(now)
                if not warned and now - self.waiting_since > self.slow:
                    warned = True
                    log.warning("mesh: worker %d has waited %.1f s in %s for %s (they are alive: heard %s); the "
                                "workers are not at the same point of the common sequence", self.index,
                                now - self.waiting_since, what, ", ".join(self.name(p) for p in blocked),
                                ", ".join(f"worker {p} {now - self._heard.get(p, now):.1f} s ago" for p in blocked))
                self._poll(min(self.heartbeat, 0.05))
                then, now = now, time.monotonic()
                for p in blocked:
                    self.waited[p] = self.waited.get(p, 0.0) + (now - then)
        finally:
            self.waiting_on = ()
            self.waiting_since = None

    def _check_peers(self, now: float) -> None:
        """`PeerLost` for the first peer not heard from for ``peer_timeout`` seconds."""
        for p in self._peers:
            if now - self._heard.get(p, now) > self.peer_timeout:
                self._lose(p)
                raise PeerLost(f"mesh: worker {self.index} heard nothing from {self.name(p)} for "
                               f"{now - self._heard[p]:.1f} s (peer_timeout {self.peer_timeout:g} s)")

    def _lose(self, peer: int) -> None:
        self.lost.append(self.name(peer))
        self.peers_lost.add(peer)

    def _poll(self, timeout: float) -> None:
        """File every message that arrives within ``timeout`` seconds (all that are there, at least)."""
        router = self._router
        if not router.getsockopt(_EVENTS) & _POLLIN and (timeout <= 0 or not self._poller.poll(int(timeout * 1000))):
            return
        while True:  # one is there: the socket said so
            identity = router.recv()
            frames = [router.recv(copy=False)]
            while router.getsockopt(_RCVMORE):
                frames.append(router.recv(copy=False))
            self._file(identity, [f.buffer for f in frames])
            if not router.getsockopt(_EVENTS) & _POLLIN:
                return

    def _file(self, identity: bytes, frames: list) -> None:
        sender = identity.split(b"/")[0].decode("ascii", "replace")
        peer = int(sender[1:]) if sender[:1] == "w" and sender[1:].isdigit() else -1
        if peer in self._codes_in and peer not in self._hellos:  # kept until its hello comes (see `_early`)
            seen = wire.peek(frames[0]) if frames else None
            if seen is not None and seen[0] not in (wire.HELLO, wire.BEAT):
                self._early.setdefault(peer, []).append((seen[1], [bytes(f) for f in frames]))
                return
        codes = len(self._codes_in[peer]) if peer in self._codes_in else 0
        m = wire.decode(frames, sender=self.name(peer) if peer in self._codes_in else f"connection {sender!r}",
                        me=self.index, workers=self.workers, run=self._token, codes=codes)
        if m.kind != wire.HELLO and self._hellos.get(peer) != m.incarnation:
            return  # sent before its hello reached this worker (a heartbeat), or by an earlier incarnation
        if m.source != peer:
            raise wire.MeshMessageError(f"mesh: refused a message from {self.name(peer)} at worker {self.index}: "
                                        f"it claims to come from worker {m.source}")
        self._heard[peer] = time.monotonic()
        if m.kind == wire.BATCH:
            if m.form == wire.CODES:
                self._codes_in[peer].extend(m.values)
            batches, markers = self._boxes.setdefault((m.channel, m.seq), ([], {}))
            batches.append(m)
            self.received_bytes += sum(len(f) for f in frames[1:])
            if m.ends:  # its step's marker too
                if peer in markers:
                    raise MeshError(f"mesh: exchange {m.channel} step {m.seq}: {self.name(peer)} marked it twice")
                markers[peer] = m  # `receive` counts the step's batches from this peer for it
        elif m.kind == wire.MARKER:
            markers = self._boxes.setdefault((m.channel, m.seq), ([], {}))[1]
            if peer in markers:
                raise MeshError(f"mesh: exchange {m.channel} step {m.seq}: {self.name(peer)} marked it twice")
            markers[peer] = m
        elif m.kind == wire.VOTE:
            votes = self._votes.setdefault(m.seq, {})
            if peer in votes:
                raise MeshError(f"mesh: agreement {m.seq}: {self.name(peer)} voted twice")
            votes[peer] = m.vote
        elif m.kind == wire.HELLO:
            if peer in self._hellos and self._hellos[peer] != m.incarnation:
                self._lose(peer)
                raise PeerLost(f"mesh: {self.name(peer)} restarted (a new hello): its part of the run is gone")
            if self._started and (m.count or peer not in self._hellos):  # it asks, or this worker's hello
                self._dealers[peer].send(self._head(wire.HELLO, peer))  # may have reached an earlier incarnation
            self._hellos[peer] = m.incarnation
            for incarnation, held in self._early.pop(peer, []):
                if incarnation == m.incarnation:
                    self._file(identity, held)
