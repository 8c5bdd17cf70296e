"""Mesh workers started with ``--snapshot-from`` (a snapshot written as a backfill would, without
Spark): each loads the keys it owns, the two close the epoch up to its frontier F together and the
result topic's view equals the engine's at F and every frontier after it. Stopped, they checkpoint
the same last epoch; started again (still with ``--snapshot-from``) they restore those checkpoints
instead of the snapshot, and their results stay exact."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mesh_daemon import check, mesh_config  # noqa: E402
from test_workers_daemon import DDFLOW, MS, T0, Daemons, oracle, stream  # noqa: E402

from ddflow.daemon.kafka.producer import UpdateProducer  # noqa: E402
from ddflow.daemon.kafka.results import ResultClient  # noqa: E402
from ddflow.daemon.state.snapshot import SnapshotWriter, columns_for_fields  # noqa: E402
from support.broker import FETCH_WAIT_MS  # noqa: E402

pytestmark = pytest.mark.kafka


class FromSnapshot(Daemons):
    """`Daemons` started with ``--snapshot-from``."""

    def __init__(self, path: Path, workers: int, snapshot: Path) -> None:
        self.logs = [[] for _ in range(workers)]
        self.processes = [subprocess.Popen([DDFLOW, "run", "--config", str(path), "--worker-index", str(i),
                                            "--snapshot-from", str(snapshot)],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                          for i in range(workers)]
        for i, p in enumerate(self.processes):
            threading.Thread(target=lambda p=p, i=i: self.logs[i].extend(p.stdout), daemon=True).start()


def test_mesh_workers_start_from_a_snapshot_then_restore_their_checkpoints(kafka_broker, make_topic, tmp_path):
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, results, dead = make_topic("in", 4), make_topic("out", 3), make_topic("dead")
    rounds = stream("reachability", rounds=5)
    want = oracle("reachability", rounds)
    frontier = T0 + 20 * MS  # the history: rounds 0 and 1, in the snapshot; the rest live on the topic
    base = Counter()
    for ups in rounds[:2]:
        for record, _, d in ups:
            base[record] += d
    writer = SnapshotWriter(tmp_path / "snapshot", frontier, shards=3, origin="backfill")
    writer.add_input("edges", source, columns_for_fields({"src": "int", "dst": "int"}),
                     {r: c for r, c in base.items() if c}, (), {p: 0 for p in range(4)})
    snapshot = writer.commit()
    path = mesh_config(tmp_path, bootstrap, "reachability", 2, source, results, dead)
    path.write_text(path.read_text() + f'\n[checkpoint]\nlocation = "{tmp_path / "ckpt"}"\ninterval = "60s"\n')

    def send(producer: UpdateProducer, first: int, last: int) -> None:
        for r in range(first, last):
            for record, t, d in rounds[r]:
                producer.send(record, t, d)
            producer.advance_to(T0 + 10 * (r + 1) * MS)
            producer.flush()

    with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
        daemons = FromSnapshot(path, 2, snapshot)
        try:
            send(producer, 2, 4)
            check(client, want, T0 + 40 * MS, daemons)
        finally:
            codes = daemons.stop()
        assert codes == [0, 0], daemons.log()
        assert all(f"worker {i} of 2 loads the keys it owns" in "".join(daemons.logs[i]) for i in range(2)), \
            daemons.log()
        again = FromSnapshot(path, 2, snapshot)
        try:
            send(producer, 4, 5)
            check(client, want, T0 + 50 * MS, again)
        finally:
            codes = again.stop()
        assert codes == [0, 0], again.log()
    for i in range(2):
        log = "".join(again.logs[i])
        assert "restoring checkpoint" in log and "loads the keys it owns" not in log, again.log()
