"""One of two ``ddflow run`` workers SIGKILLed at random points under a stream of updates, and
restarted: the other waits for it (its /readyz and ddflow_exchange_waiting say so), the restarted
worker replays the generation, and the result topic's view at every frontier equals the engine's
(nothing lost, nothing counted twice). A worker that exits (worker 0 restarted without its state
voids the generation: the other joins the new one, exiting 1 first if it was running) is restarted
as a supervisor would."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from test_workers_daemon import DDFLOW, MS, T0, config, oracle  # type: ignore[import-not-found]

from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka


class Supervised:
    """Worker processes restarted whenever they exit (as systemd or a StatefulSet would)."""

    def __init__(self, path, workers: int) -> None:
        self.path, self.workers = path, workers
        self.processes: list[subprocess.Popen | None] = [None] * workers
        self.logs: list[list[str]] = [[] for _ in range(workers)]
        self.starts = [0] * workers
        self.exits: list[tuple[int, int]] = []  # (worker, code) of processes that ended on their own
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.held: set[int] = set()  # killed workers not to restart yet
        for i in range(workers):
            self.start(i)
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        self.watcher.start()

    def start(self, i: int) -> None:
        p = subprocess.Popen([DDFLOW, "run", "--config", str(self.path), "--worker-index", str(i)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = self.logs[i]
        lines.append(f"=== start {self.starts[i]}\n")
        threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
        self.processes[i] = p
        self.starts[i] += 1

    def watch(self) -> None:
        while not self.done.is_set():
            with self.lock:
                for i, p in enumerate(self.processes):
                    if p is not None and p.poll() is not None and i not in self.held:
                        if p.returncode != -signal.SIGKILL:
                            self.exits.append((i, p.returncode))
                        if len(self.exits) > 10:  # a worker that keeps failing: leave it down (the test fails)
                            self.held.add(i)
                            continue
                        self.start(i)
            time.sleep(0.1)

    def kill(self, i: int, *, restart: bool = True) -> None:
        """SIGKILL worker ``i``; restart it at once, or (``restart=False``) when `restart` is called."""
        with self.lock:
            p = self.processes[i]
            p.kill()
            p.wait()
            if restart:
                self.start(i)
            else:
                self.held.add(i)

    def restart(self, i: int) -> None:
        with self.lock:
            self.held.discard(i)
            self.start(i)

    def metrics_url(self, i: int, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.findall(r"metrics on (http://[\d.]+:\d+)/metrics", "".join(self.logs[i]))
            if found:
                return found[-1]
            time.sleep(0.1)
        raise AssertionError(f"worker {i} serves no metrics:\n{self.log()}")

    def log(self, last: int | None = 60) -> str:
        return "\n".join(f"--- worker {i}\n" + "".join(lines[-last if last else 0:]) for i, lines in enumerate(self.logs))

    def stop(self) -> list[int | None]:
        self.done.set()
        self.watcher.join()
        codes = []
        for p in self.processes:
            p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                codes.append(p.wait(timeout=90))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
        return codes


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def stream(rounds: int, seed: int) -> list[list[tuple[object, int, int]]]:
    rng = random.Random(seed)
    out, alive = [], []
    for r in range(rounds):  # a record is removed only after the round that inserted it (a loop over
        ups, added = [], []  # negative counts need not end)
        for k in range(25):
            t = T0 + (10 * r + k % 10) * MS
            if alive and rng.random() < 0.3:
                ups.append((alive.pop(rng.randrange(len(alive))), t, -1))
            else:
                record = (rng.randrange(25), rng.randrange(25))
                added.append(record)
                ups.append((record, t, 1))
        alive.extend(added)
        out.append(ups)
    return out


@pytest.mark.parametrize("checkpoints", [False, True], ids=["replay", "checkpoints"])
def test_a_worker_killed_at_random_points_and_restarted_ends_equal_to_the_engine(kafka_broker, make_topic, tmp_path,
                                                                                 checkpoints):
    """Without checkpoints a restarted worker replays the generation from its start (worker 0 starts a
    new one); with them each worker restores its own checkpoint alone (its inputs and what its
    exchange points held) and re-reads the topics from the offsets recorded there, and worker 0
    restarted stays in the generation."""
    rng = random.Random(int(time.time()))
    seed = rng.randrange(1000)
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 10}
    source, results, dead = make_topic("in", 4), make_topic("out", 2), make_topic("dead")
    rounds = stream(30, seed)
    want = oracle("reachability", rounds)
    final = T0 + 10 * len(rounds) * MS
    path = config(tmp_path, bootstrap, "reachability", 2, source, results, dead)
    if checkpoints:
        path.write_text(path.read_text() + f'\n[checkpoint]\nlocation = "{tmp_path / "ckpt"}"\ninterval = "300ms"\n')
    workers = Supervised(path, 2)
    victims = [1] + [rng.randrange(2) for _ in range(2)]  # the first kill checks the other's readiness
    sent = threading.Event()

    def produce(producer: UpdateProducer, first: int, last: int) -> None:
        for r in range(first, last):
            for record, t, d in rounds[r]:
                producer.send(record, t, d)
            producer.advance_to(T0 + 10 * (r + 1) * MS)
            producer.flush()
            time.sleep(0.3)
        sent.set()

    try:
        with ResultClient(results, options) as client, UpdateProducer(source, options) as producer:
            produce(producer, 0, 1)
            url = workers.metrics_url(0)
            assert client.wait_for(T0 + 10 * MS, timeout=120), workers.log()  # both run: kill from now on
            sent.clear()
            feeder = threading.Thread(target=produce, args=(producer, 1, len(rounds)), daemon=True)
            feeder.start()
            for n, victim in enumerate(victims):
                time.sleep(rng.uniform(0.5, 2.0))
                workers.kill(victim, restart=n > 0)
                if n == 0:  # worker 0 waits for worker 1 (restarted once seen): not ready, and the metric names it
                    deadline = time.monotonic() + 30
                    status, body = http(url + "/readyz")
                    while not (status == 503 and "for workers [1]" in body) and time.monotonic() < deadline:
                        time.sleep(0.05)
                        status, body = http(url + "/readyz")
                    assert status == 503 and "for workers [1]" in body, (status, body, workers.log())
                    assert re.search(r'ddflow_exchange_waiting\{peer="1",worker="0"\} 1\.0', http(url + "/metrics")[1])
                    workers.restart(victim)
            feeder.join(120)
            assert sent.is_set()
            for change in client.changes(timeout=240):
                assert client.view == want.at(change.frontier - 1), (seed, change.frontier, workers.log())
                if change.frontier >= final:
                    break
            assert client.frontier is not None and client.frontier >= final, (seed, workers.log())
            assert client.view == want.at(final - 1) and client.view
    except BaseException:  # the assertion's message is cut: every worker's whole log, for the record
        sys.stderr.write(f"seed {seed}, victims {victims}\n{workers.log(last=None)}\n")
        raise
    finally:
        codes = workers.stop()
    assert codes == [0, 0], (codes, workers.log())
    assert all(code == 1 for _, code in workers.exits), (workers.exits, workers.log())
    generations = [set(re.findall(r"generation (\w+) \(agree", "".join(lines))) for lines in workers.logs]
    # without checkpoints each restart of worker 0 that got as far as joining started a generation (the
    # last one did); with them worker 0 keeps its generation beside its checkpoints
    expected = range(1, 2) if checkpoints or 0 not in victims else range(2, 2 + victims.count(0))
    assert generations[0] == generations[1] and len(generations[0]) in expected, workers.log()
    if checkpoints:  # a restarted worker restored its own checkpoint (one was written before the first kill)
        restored = [i for i in set(victims) if re.search(rf"worker {i} restored at frontier", "".join(workers.logs[i]))]
        assert restored, workers.log()
        assert all((tmp_path / "ckpt" / f"worker-{i}").is_dir() for i in range(2))
