"""Workers over the mesh (direct ZeroMQ connections): separate processes give the same results as
one dataflow with 1, 2 and 3 workers, values cross once per receiver, malformed or foreign messages
are refused naming their sender, and a worker that never comes or goes silent is named."""

from __future__ import annotations

import dataclasses
import json
import struct
import logging
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
import zmq

from ddflow.daemon.cluster import mesh_wire as wire
from ddflow.daemon.cluster.mesh import Interrupted, MeshTimeout, MeshTransport, PeerLost, listen_address, MeshError
from ddflow.operators import Dataflow
from ddflow.operators.transport import ABSTAIN, IDLE, ExchangeBatch, ExchangeMarker

import run_mesh_worker as script


def ipc(tmp_path, count: int) -> list[str]:
    return [f"ipc://{tmp_path}/w{i}" for i in range(count)]


def free_ports(count: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.parametrize("count,scheme", [(1, "ipc"), (2, "ipc"), (3, "tcp")])
def test_workers_in_separate_processes_over_the_mesh_equal_one_dataflow(tmp_path, count, scheme):
    single = Dataflow()
    roots, edges, want = script.build(single)
    roots.insert(0, 0)
    for start, end in script.EPOCHS:
        script.feed(roots, edges, start, end)
        single.run()
    addresses = (ipc(tmp_path, count) if scheme == "ipc"
                 else [f"tcp://127.0.0.1:{p}" for p in free_ports(count)])
    run = uuid.uuid4().hex
    procs = [subprocess.Popen([sys.executable, script.__file__, ",".join(addresses), str(i), run],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(count)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    for k, probe in enumerate(want):
        union: dict = {}
        for r in results:
            assert r["frontier"][k] == [10 * script.EPOCHS[-1][1]]
            for record, t, d in r["updates"][k]:
                key = (json.dumps(record), t)
                union[key] = union.get(key, 0) + d
        assert {key: d for key, d in union.items() if d} == {(json.dumps(r), t): d for r, t, d in probe.updates}
        assert probe.updates  # the comparison is not of two empty outputs
    if count > 1:
        assert all(r["figures"]["steps"] and r["figures"]["sent_bytes"] for r in results)


def batch(seq: int, source: int, dest: int, records) -> tuple[ExchangeBatch, ExchangeMarker]:
    n = len(records)
    return (ExchangeBatch(0, seq, source, dest, 0, 10, (2,), records, np.zeros((n, 2), dtype=np.int64),
                          np.ones(n, dtype=np.int64)),
            ExchangeMarker(0, seq, source, dest, 0, 10, (2,), n))


def pair(tmp_path, **options) -> list[MeshTransport]:
    addresses = ipc(tmp_path, 2)
    return [MeshTransport(addresses, i, run="r", **options) for i in range(2)]


def both(work):
    """``work(i)`` on two threads (ends 0 and 1), returning their results."""
    out: list = [None, None]
    errors: list = []

    def go(i):
        try:
            out[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def test_values_cross_once_per_receiver_and_come_back_equal(tmp_path):
    ends = pair(tmp_path)
    records = [("a", 1), "b", None, 2.5, ("a", 1), "b", (True, ("x", b"y"))]
    try:
        def step(i):
            if i == 0:
                for seq in range(2):
                    b, m = batch(seq, 0, 1, records)
                    ends[0].send(b)
                    ends[0].mark(m)
                    sizes.append(ends[0].sent_bytes)
                return None
            return [ends[1].receive(1, 0, seq) for seq in range(2)]

        sizes: list[int] = []
        first, second = both(step)[1]
        assert first[0].records == records and second[0].records == records
        assert first[0].rounds == (2,) and first[0].times.shape == (7, 2)
        assert len(ends[0]._codes_out[1]) == 5 == len(ends[1]._codes_in[0])  # 5 distinct values, sent once
        columns = 7 * 8 * 4  # codes, times (depth 2) and diffs
        assert sizes[1] - sizes[0] == columns + 1 < sizes[0]  # the second batch carried no values (an empty list)
    finally:
        for e in ends:
            e.close()


def test_ints_and_pairs_cross_as_columns_and_agreements_gather_in_worker_order(tmp_path):
    ends = pair(tmp_path)
    try:
        def work(i):
            b, m = batch(0, i, 1 - i, np.arange(6, dtype=np.int64).reshape(3, 2) + 10 * i)
            ends[i].send(b)
            ends[i].mark(m)
            got = ends[i].receive(i, 0, 0)
            return got[0].records.tolist(), ends[i].gather(i, 0, {"w": i, "f": [[i]]})

        (r0, v0), (r1, v1) = both(work)
        assert r0 == [[10, 11], [12, 13], [14, 15]] and r1 == [[0, 1], [2, 3], [4, 5]]
        assert v0 == v1 == [{"w": 0, "f": [[0]]}, {"w": 1, "f": [[1]]}]
        assert [(e.steps, e.agreements) for e in ends] == [(1, 1), (1, 1)]  # what the benchmarks count
    finally:
        for e in ends:
            e.close()


def test_a_steps_last_batch_carries_its_marker(tmp_path):
    """A step that sends updates to a worker costs it one message (the batch ends the step); with
    two batches in a step the second ends it and the receiver counts both; a step that sends none
    is a marker alone."""
    ends = pair(tmp_path)
    kinds: list[tuple[int, bool]] = []
    filed = ends[1]._file

    def spy(identity, frames):
        m = wire.peek(frames[0])
        if m is not None and m[0] in (wire.BATCH, wire.MARKER):
            head = wire.decode(frames, sender="w0", me=1, workers=2, run=ends[1]._token,
                               codes=len(ends[1]._codes_in[0]))
            kinds.append((head.kind, head.ends))
        filed(identity, frames)

    ends[1]._file = spy
    try:
        def work(i):
            if i == 1:
                return [ends[1].receive(1, 0, seq) for seq in range(3)]
            one, end = batch(0, 0, 1, np.arange(3, dtype=np.int64))
            ends[0].send(one)
            ends[0].mark(end)
            first, _ = batch(1, 0, 1, np.arange(2, dtype=np.int64))
            second, _ = batch(1, 0, 1, np.arange(4, dtype=np.int64) + 10)
            ends[0].send(first)
            ends[0].send(second)
            ends[0].mark(ExchangeMarker(0, 1, 0, 1, 0, 10, (2,), 6))
            ends[0].mark(batch(2, 0, 1, [])[1])
            return None

        steps = both(work)[1]
        assert [[b.records.tolist() for b in step] for step in steps] == [[[0, 1, 2]], [[0, 1], [10, 11, 12, 13]], []]
        assert kinds == [(wire.BATCH, True), (wire.BATCH, False), (wire.BATCH, True), (wire.MARKER, False)]
    finally:
        for e in ends:
            e.close()


def test_ballots_ride_on_markers_and_on_batches_that_end_a_step(tmp_path):
    """A marker's ballot reaches the receiver whether the marker goes alone or with the step's last
    batch; a step without ballots reads as abstaining."""
    ends = pair(tmp_path)
    try:
        def work(i):
            if i == 1:
                got = []
                for seq in range(3):
                    ends[1].receive(1, 0, seq)
                    got.append(ends[1].ballots(1))
                return got
            one, end = batch(0, 0, 1, np.arange(3, dtype=np.int64))
            ends[0].send(one)
            ends[0].mark(dataclasses.replace(end, ballot=7))
            ends[0].mark(dataclasses.replace(batch(1, 0, 1, [])[1], ballot=IDLE))
            ends[0].mark(batch(2, 0, 1, [])[1])
            return None

        assert both(work)[1] == [[7], [IDLE], [ABSTAIN]]
    finally:
        for e in ends:
            e.close()


def test_a_batch_ending_a_step_twice_is_refused(tmp_path):
    ends = pair(tmp_path)
    try:
        both(lambda i: ends[i].start())
        b, m = batch(0, 0, 1, np.arange(2, dtype=np.int64))
        ends[0].send(b)
        ends[0].mark(m)  # the batch goes with this end of its step
        ends[0].mark(m)  # a second end of the same step
        with pytest.raises(MeshError, match="step 0: worker 0 .* marked it twice"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ends[1]._poll(0.05)
    finally:
        for e in ends:
            e.close()


def frames_of(head: bytes, *rest) -> list:
    return [head, *rest]


@pytest.mark.parametrize("frames,why", [
    ([b"junk"], "fewer than"),
    ([b"xxxx" + wire.header(wire.BEAT, 0, 1, 7)[4:]], "not a ddflow mesh message"),
    ([wire.header(wire.BEAT, 0, 1, 8)], "another run"),
    ([wire.header(wire.BEAT, 0, 1, 7)[:4] + bytes([1]) + wire.header(wire.BEAT, 0, 1, 7)[5:]],
     "protocol version 1, this worker speaks 3"),  # a worker of before a step's batch carried its marker
    ([wire.header(wire.BEAT, 0, 1, 7)[:4] + bytes([2]) + wire.header(wire.BEAT, 0, 1, 7)[5:]],
     "protocol version 2, this worker speaks 3"),  # a worker of before markers carried ballots
    ([wire.header(wire.MARKER, 0, 1, 7, ballot=-3)], "ballot -3"),
    ([struct.pack("<4sBBHHiqqqBBqBBqqq", b"ddfm", 2, wire.MARKER, 0, 1, 0, 0, 0, 0, 3, 0, 0, 1, 0, 7, 0, 0)],
     "protocol version 2, this worker speaks 3"),  # a version 2 worker's marker, as it was: 8 bytes shorter
    ([wire.header(wire.BEAT, 1, 1, 7)], "source worker 1 is not another worker"),
    ([wire.header(wire.BEAT, 0, 0, 7)], "addressed to worker 0"),
    ([wire.header(9, 0, 1, 7)], "unknown kind 9"),
    ([wire.header(wire.BATCH, 0, 1, 7, count=2, depth=1), b"\0" * 16, b"\0" * 8, b"\0" * 16], "times frame holds 8"),
    ([wire.header(wire.BATCH, 0, 1, 7, count=1, depth=1, form=wire.CODES), np.int64(3).tobytes(),
      b"\0" * 8, b"\0" * 8, b"\x91\x01"], "code outside the 1 values"),
    ([wire.header(wire.BATCH, 0, 1, 7, count=0, depth=1, form=wire.CODES, first=4), b"", b"", b"", b"\x90"],
     "start at code 4"),
    ([wire.header(wire.VOTE, 0, 1, 7), b"\xc1"], "not msgpack"),
    ([wire.header(wire.MARKER, 0, 1, 7), b"extra"], "of 2 frames, not 1"),
])
def test_the_decoder_refuses_malformed_and_foreign_messages_naming_the_sender(frames, why):
    with pytest.raises(wire.MeshMessageError, match=rf"from worker 0 \(tcp://a:1\) at worker 1: .*{why}"):
        wire.decode(frames, sender="worker 0 (tcp://a:1)", me=1, workers=2, run=7)


def test_a_message_from_another_run_or_claiming_another_sender_fails_the_receiver(tmp_path):
    ends = [MeshTransport(ipc(tmp_path, 2), 0, run="mine")]
    spy = zmq.Context.instance().socket(zmq.DEALER)
    try:
        spy.setsockopt(zmq.IDENTITY, b"w1")
        spy.connect(ends[0].addresses[0])
        spy.send(wire.header(wire.HELLO, 1, 0, wire.run_token("theirs")))
        with pytest.raises(wire.MeshMessageError, match=r"from worker 1 \(ipc://.*w1\) at worker 0: .*another run"):
            ends[0].start()
    finally:
        spy.close(0)
        ends[0].close()


def test_a_worker_that_never_comes_is_named_with_its_address(tmp_path):
    end = MeshTransport(ipc(tmp_path, 2), 0, run="r", start_timeout=0.5)
    try:
        with pytest.raises(MeshTimeout, match=r"waited 0.5 s at start-up for worker 1 \(ipc://.*/w1\)"):
            end.gather(0, 0, True)
    finally:
        end.close()


def test_a_silent_peer_is_lost_by_name_after_the_timeout(tmp_path):
    ends = pair(tmp_path, heartbeat=0.05, peer_timeout=0.5)
    try:
        both(lambda i: ends[i].start())
        ends[1].close()  # gone: no vote, no heartbeat
        with pytest.raises(PeerLost, match=r"heard nothing from worker 1 \(ipc://.*/w1\)"):
            ends[0].gather(0, 0, True)
        assert ends[0].lost == [ends[0].name(1)]
    finally:
        ends[0].close()


def test_a_busy_peer_that_beats_is_waited_for(tmp_path):
    ends = pair(tmp_path, heartbeat=0.05, peer_timeout=1.0)
    try:
        def work(i):
            if i == 1:
                threading.Event().wait(1.5)  # longer than peer_timeout, but its heartbeat goes on
            return ends[i].gather(i, 0, i)

        assert both(work) == [[0, 1], [0, 1]]
    finally:
        for e in ends:
            e.close()


def test_a_long_wait_for_a_live_peer_elsewhere_in_the_sequence_is_logged_naming_the_agreement(tmp_path):
    ends = pair(tmp_path, heartbeat=0.05, peer_timeout=5.0, slow=0.3)
    warnings: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logger = logging.getLogger("ddflow.daemon.cluster.mesh")
    catch = Catch(logging.WARNING)
    logger.addHandler(catch)
    done = threading.Event()
    ends[0].stop = lambda: any("worker 0 has waited" in w for w in warnings)  # once it said why it waits
    ends[1].stop = done.is_set
    ends[0].interruptible = ends[1].interruptible = True
    try:
        both(lambda i: ends[i].start())
        elsewhere = threading.Thread(target=lambda: pytest.raises(Interrupted, ends[1].gather, 1, 3, "elsewhere"))
        elsewhere.start()  # worker 1 votes in agreement 3 while worker 0 waits in agreement 4
        try:
            with pytest.raises(Interrupted):
                ends[0].gather(0, 4, "here")
        finally:
            done.set()
            elsewhere.join(10)
        [message] = [w for w in warnings if "worker 0 has waited" in w]
        assert "in agreement 4 for worker 1 (ipc://" in message, message
        assert ends[0].lost == []  # alive: it beats
    finally:
        logger.removeHandler(catch)
        for e in ends:
            e.close()


def test_addresses_listen_on_every_interface_and_bad_ones_are_refused():
    assert listen_address("tcp://ddflow-2.ddflow:7070") == "tcp://*:7070"
    assert listen_address("ipc:///run/ddflow/w0") == "ipc:///run/ddflow/w0"
    for bad in ("tcp://host", "http://x:1", "host:1"):
        with pytest.raises(MeshError, match="mesh address"):
            listen_address(bad)


def test_a_peer_restarted_after_it_took_a_hello_meets_the_worker_that_sent_it(tmp_path):
    """Worker 0's hello reached worker 1's earlier incarnation (which then died): the new one meets
    worker 0 all the same, which says hello again when it hears the new one's."""
    addresses = ipc(tmp_path, 2)
    first = MeshTransport(addresses, 0, run="r", start_timeout=20)
    old = MeshTransport(addresses, 1, run="r")
    starting = threading.Thread(target=first.start)
    starting.start()
    try:
        deadline = time.monotonic() + 10
        while 0 not in old._hellos and time.monotonic() < deadline:
            old._poll(0.05)
        assert 0 in old._hellos  # it took worker 0's hello, then dies without answering
        old.close()
        new = MeshTransport(addresses, 1, run="r", start_timeout=5)
        try:
            new.start()  # a MeshTimeout without the second hello
        finally:
            new.close()
        starting.join(10)
        assert not starting.is_alive()
    finally:
        starting.join(10)
        first.close()


def test_a_hello_lost_in_a_dead_connection_is_asked_for_again(tmp_path):
    """Worker 0's hellos to worker 1 are lost (written into a connection to a worker 1 that had
    died): worker 1, still missing worker 0's, asks again, and worker 0 answers."""
    ends = pair(tmp_path, start_timeout=10)
    dealer, lost = ends[0]._dealers[1], []

    class Lossy:
        def send(self, frame, *args, **kwargs):
            if len(lost) < 2:  # its first hello and its answer to worker 1's first hello
                lost.append(wire.decode([frame], sender="w0", me=1, workers=2, run=ends[1]._token).kind)
                return None
            return dealer.send(frame, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(dealer, name)

    ends[0]._dealers[1] = Lossy()
    try:
        assert both(lambda i: ends[i].gather(i, 0, i)) == [[0, 1], [0, 1]]  # worker 0 reads the asks in it
        assert lost == [wire.HELLO, wire.HELLO]
    finally:
        ends[0]._dealers[1] = dealer
        for e in ends:
            e.close()


def test_a_peer_that_beat_while_this_worker_was_busy_is_not_lost(tmp_path):
    """Worker 0 reads nothing for longer than peer_timeout (opening, loading a checkpoint): worker 1's
    heartbeats wait in its socket, and are read before worker 1 is judged."""
    ends = pair(tmp_path, heartbeat=0.05, peer_timeout=0.5)
    try:
        both(lambda i: ends[i].start())
        time.sleep(1.5)  # neither reads; both beat
        assert both(lambda i: ends[i].gather(i, 0, i)) == [[0, 1], [0, 1]]
    finally:
        for e in ends:
            e.close()
