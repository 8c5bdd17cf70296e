"""SIGTERM while a starting daemon reads its result topic back: the read notices the stop, nothing
is published, the daemon exits 0, and the next start reads the topic again from where it read
before (nothing lost).

The result topic is filled with many epochs first (a sink of the test's own). The daemon runs as a
subprocess against the real broker, with a dataflow module that makes the read back take one
message per read and hold after its first one while a gate file exists, and that notes when the
SIGTERM reaches the worker: the test sends SIGTERM in the middle of the read, releases it, and reads
the log for what happened. (The subprocess helper is local to this file.)"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from support.daemons import MS, Daemon, module_env, one_input_config

from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.operators.lattice import T_MIN

pytestmark = pytest.mark.kafka

EPOCHS = 200  # a marker and a batch each: 400 messages to read back

FLOW = '''
import os, time

from ddflow.daemon import worker
from ddflow.daemon.kafka import reading

GATE = os.environ["READ_GATE"]
_read_once = reading.read_once


def one_at_a_time(consumer, routes, timeout, max_messages, out_of_range=None):
    """The read back takes one message per read; after its first, it waits while GATE/hold exists."""
    changes, count = _read_once(consumer, routes, timeout, 1, out_of_range)
    if count:
        open(os.path.join(GATE, "reading"), "a").write("+")
        while os.path.exists(os.path.join(GATE, "hold")):
            time.sleep(0.02)
    return changes, count


reading.read_once = one_at_a_time
_stop = worker.Worker.stop


def stop(self, *args, **kwargs):
    """The daemon's SIGTERM reached the worker: say so in GATE/stopping."""
    open(os.path.join(GATE, "stopping"), "w").close()
    return _stop(self, *args, **kwargs)


worker.Worker.stop = stop


def flow(df, inputs):
    return {"out": inputs["a"].map(lambda r: (r[0], r[1] + 1))}
'''


def test_sigterm_while_reading_the_result_topic_back_stops_the_read_and_exits_0(
        kafka_broker, kafka_options, make_topic, tmp_path: Path) -> None:
    source, out, dead = make_topic("a"), make_topic("out"), make_topic("dead")
    filler = KafkaSink([OutputSpec("out", out)], kafka_options, transactional_id=f"fill-{out}", resume=False)
    filler.open()
    for i in range(EPOCHS):
        filler.publish(T_MIN if i == 0 else i * MS, (i + 1) * MS, {"out": [((i, i), i * MS, 1)]})
    filler.commit()
    filler.close()
    (tmp_path / "readflow.py").write_text(FLOW)
    gate = tmp_path / "gate"
    gate.mkdir()
    config = one_input_config(tmp_path / "daemon.toml", kafka_broker.bootstrap, "readflow:flow", source, out, dead,
                              sections='\n[worker]\nstop_timeout = "120s"\n')
    (gate / "hold").touch()
    daemon = Daemon(config, env=module_env(tmp_path, READ_GATE=str(gate)))
    try:
        daemon.wait_for_file(gate / "reading")  # the read back took its first message and holds
        daemon.process.send_signal(signal.SIGTERM)
        daemon.wait_for_file(gate / "stopping")  # the SIGTERM reached the worker, the read still held
        (gate / "hold").unlink()  # the read goes on: it must notice the stop at its next read
        assert daemon.exit_code() == 0, daemon.log
    finally:
        daemon.kill()
    log = daemon.log
    assert "Traceback" not in log, log
    stopped = re.search(r"stopped while opening \(stopped while reading result topics \['[^']+'\] back: "
                        r"(\d+) messages read, (\S+) not at their end yet", log)
    assert stopped is not None, log
    assert stopped.group(2) == f"{out}[0]"
    read = int(stopped.group(1))
    assert 1 <= read < 2 * EPOCHS  # it stopped in the middle, not at the end
    assert "worker open" not in log and "outputs open" not in log, log  # it never opened

    again = Daemon(config, env=module_env(tmp_path, READ_GATE=str(gate)))  # no hold: the next start reads the whole topic back
    try:
        final = again.wait_for(r"out->\S+ final from (\d+)")
        assert int(final.group(1)) == EPOCHS * MS, again.log  # nothing of what was published is lost
        again.wait_for("worker open")
        again.process.send_signal(signal.SIGTERM)
        assert again.exit_code() == 0, again.log
    finally:
        again.kill()


def test_a_read_back_stopped_in_process_leaves_no_producer_open(kafka_options, make_topic) -> None:
    """`KafkaSink.open` stopped while it reads its result topic back raises `Stopped` and lets its
    producer go (an in-process caller that opens a sink again does not keep the first one's)."""
    from ddflow.daemon.exceptions import Stopped

    out = make_topic("out")
    filler = KafkaSink([OutputSpec("out", out)], kafka_options, transactional_id=f"fill-{out}", resume=False)
    filler.open()
    filler.publish(T_MIN, MS, {"out": [((1, 1), 0, 1)]})
    filler.commit()
    filler.close()
    sink = KafkaSink([OutputSpec("out", out)], kafka_options, transactional_id=f"again-{out}")
    with pytest.raises(Stopped):
        sink.open(stop=lambda: True)
    assert sink._producer is None
    sink.close()  # nothing left to close: no error
