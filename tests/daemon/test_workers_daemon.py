"""Several ``ddflow run`` processes share one dataflow over the real broker: worker i of W reads the
input partitions p % W == i, exchanges by key with the others over the mesh (at the default
addresses: no ``workers.addresses`` in the config, the workers share a host), agrees on every
epoch's end and publishes as writer i of W; the result topic's view at every frontier equals the
engine's on the same input, for 1, 2 and 4 workers, for count-per-page and for reachability
(iterative)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from ddflow.config.dataflows import page_counts, reachability
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient
from ddflow.operators import Dataflow
from support.broker import FETCH_WAIT_MS
from support.daemons import terminate
from support.results import dump_topic, reader_state

pytestmark = pytest.mark.kafka

# the metrics that say how far a worker got (read, closed, published, waiting on the mesh)
PROGRESS = ("ddflow_input_updates_total", "ddflow_input_partition_frontier", "ddflow_consumer_lag", "ddflow_epochs_total",
            "ddflow_output_frontier", "ddflow_output_updates_total", "ddflow_exchange_waiting", "ddflow_ready",
            "ddflow_worker_loop_timestamp")
DDFLOW = str(Path(sys.executable).parent / "ddflow")
T0 = 1_700_000_000_000_000_000
MS = 1_000_000

FLOWS = {
    "count-per-page": ("page_counts", "", "views", '{ user = "str", page = "str" }', "page_views"),
    "reachability": ("reachability", "args = { roots = [0, 1] }", "edges", '{ src = "int", dst = "int" }', "reachable"),
}


def stream(flow: str, rounds: int = 3) -> list[list[tuple[object, int, int]]]:
    """Per round, updates at times in that round's 10 ms (removals of earlier records included)."""
    rng = random.Random(7)
    out, alive = [], []
    for r in range(rounds):  # a record is removed only after the round that inserted it
        ups, added = [], []
        for k in range(40):
            t = T0 + (10 * r + k % 10) * MS
            if alive and rng.random() < 0.25:
                ups.append((alive.pop(rng.randrange(len(alive))), t, -1))
                continue
            record = (f"u{rng.randrange(30)}", f"p{rng.randrange(12)}") if flow == "count-per-page" else \
                (rng.randrange(30), rng.randrange(30))
            added.append(record)
            ups.append((record, t, 1))
        alive.extend(added)
        out.append(ups)
    return out


def oracle(flow: str, rounds: list) -> object:
    df = Dataflow()
    name = FLOWS[flow][2]
    session = df.new_input(name)
    outputs = page_counts(df, {name: session.collection}) if flow == "count-per-page" else \
        reachability(df, {name: session.collection}, roots=[0, 1])
    capture = outputs[FLOWS[flow][4]].capture()
    for ups in rounds:
        for record, t, d in ups:
            session.update(record, t, d)
    session.close()
    df.run()
    return capture


def config(tmp_path: Path, bootstrap: str, flow: str, workers: int, source: str, results: str, dead: str) -> Path:
    function, args, name, fields, output = FLOWS[flow]
    path = tmp_path / "daemon.toml"
    path.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:{function}"
{args}

[kafka]
bootstrap = "{bootstrap}"
group_id = "{source}"
commit_interval = "0s"

[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

[[inputs]]
name = "{name}"
topic = "{source}"
fields = {fields}

[[outputs]]
name = "{output}"
topic = "{results}"

[epoch]
resolution = "5ms"

[dead_letter]
topic = "{dead}"

[metrics]
address = "127.0.0.1:0"

[workers]
count = {workers}
wait_timeout = "60s"
""")
    return path


class Daemons:
    """``ddflow run --worker-index i`` for every worker, their output collected."""

    def __init__(self, path: Path, workers: int) -> None:
        self.logs: list[list[str]] = [[] for _ in range(workers)]
        self.processes = [subprocess.Popen([DDFLOW, "run", "--config", str(path), "--worker-index", str(i)],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                          for i in range(workers)]
        for i, p in enumerate(self.processes):
            threading.Thread(target=lambda p=p, i=i: self.logs[i].extend(p.stdout), daemon=True).start()

    def log(self) -> str:
        return "\n".join(f"--- worker {i}\n" + "".join(lines[-40:]) for i, lines in enumerate(self.logs))

    def state(self, client: ResultClient, results: str, bootstrap: str) -> str:
        """What a failure needs to say where the results stopped: the log, each worker's readiness
        and progress counters, what the result client holds, and the result topic as it lies."""
        said = [self.log(), f"--- result client: frontiers {client.partition_frontiers}\n{reader_state(client)}",
                f"--- the result topic {results}\n{dump_topic(results, bootstrap)}"]
        for i, lines in enumerate(self.logs):
            found = re.search(r"metrics on (http://[\d.]+:\d+)/metrics", "".join(lines))
            if found is None:
                continue
            try:
                with urllib.request.urlopen(found.group(1) + "/metrics", timeout=5) as response:
                    text = response.read().decode()
            except OSError as exc:
                said.append(f"--- worker {i} metrics: {exc}")
                continue
            kept = [line for line in text.splitlines() if line.startswith(PROGRESS)]
            said.append(f"--- worker {i} metrics\n" + "\n".join(kept))
        return "\n".join(said)

    def stop(self) -> list[int | None]:
        return terminate(self.processes)


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("flow", ["count-per-page", "reachability"])
def test_workers_through_ddflow_run_equal_the_engine(kafka_broker, make_topic, tmp_path, flow, workers):
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, results, dead = make_topic("in", 4), make_topic("out", 3), make_topic("dead")
    rounds = stream(flow)
    want = oracle(flow, rounds)
    final = T0 + 10 * len(rounds) * MS
    daemons = Daemons(config(tmp_path, bootstrap, flow, workers, source, results, dead), workers)
    try:
        with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
            for r, ups in enumerate(rounds):  # a stream: each round sent while the workers run
                for record, t, d in ups:
                    producer.send(record, t, d)
                producer.advance_to(T0 + 10 * (r + 1) * MS)
                producer.flush()
            frontiers = []
            for change in client.changes(timeout=120):
                frontiers.append(change.frontier)
                assert client.view == want.at(change.frontier - 1), (change.frontier, daemons.log())
                if change.frontier >= final:
                    break
            assert frontiers and frontiers[-1] >= final, daemons.state(client, results, bootstrap)
            assert client.view == want.at(final - 1) and client.view
            assert len(set(client.partition_frontiers)) == 1
    finally:
        codes = daemons.stop()
    assert codes == [0] * workers, daemons.log()
    if workers > 1:
        text = daemons.log()
        assert all(f"worker {i} of {workers}: mesh at ipc://" in "".join(daemons.logs[i]) for i in range(workers)), text
