"""``ddflow run`` workers over the mesh SIGKILLed at random points under a stream of updates, one at
a time and all at once, restarted as a supervisor would: a worker that finds its peer lost (silent,
or restarted) exits 1 and is restarted too, and every worker starts again together, from the newest
checkpoint all of them completed (or, without checkpoints, from the inputs' beginning). The result
topic's view at every frontier equals the engine's: nothing lost, nothing counted twice. Two
workers replay; three restore checkpoints."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mesh_daemon import mesh_config  # noqa: E402
from test_workers_daemon import DDFLOW, MS, T0, oracle  # noqa: E402


from ddflow.daemon.exceptions import ProtocolError  # noqa: E402
from ddflow.daemon.kafka.producer import UpdateProducer  # noqa: E402
from ddflow.daemon.kafka.results import ResultClient  # noqa: E402
from support.broker import FETCH_WAIT_MS  # noqa: E402
from support.daemons import terminate  # noqa: E402
from support.results import dump_topic, marked_to, reader_state  # noqa: E402

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

    def log(self, last: int | None = 60) -> str:
        return "\n".join(f"--- worker {i}\n" + "".join(lines[-last if last else 0:]) for i, lines in enumerate(self.logs))

    def stop(self) -> list[int | None]:
        self.done.set()
        self.watcher.join()
        return terminate(self.processes)


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



def kill_all(workers: Supervised) -> None:
    for i in range(workers.workers):
        workers.kill(i, restart=False)
    for i in range(workers.workers):
        workers.restart(i)


class WrongView(AssertionError):
    """The result topic's view at a frontier is not the engine's (the gap described below)."""


class ReaderStuck(AssertionError):
    """The reader's frontier stopped short of the end while the workers had published it (the gap described below)."""


# A gap once open: after kills, a reader of the result topic failed to accept one epoch of one writer
# on a partition in about one of ten to thirty runs. It then refused that writer's next epoch as
# "epochs are missing" (ProtocolError), or stopped short of the end while every writer had marked it
# (ReaderStuck), or once showed a record more than the engine's (WrongView). Three causes were removed
# (docs/deployment.md): the embedded broker holding back a killed producer's committed transactions
# from read_committed readers for good (the reader now reads uncommitted records); a restarted writer
# marking a replayed epoch whole where it published only the times beyond a partition's final
# frontier (a reader behind it took the epoch without the times below); and a reader delivered a
# partition with a writer's epoch left out that a fresh read found in place (the reader now reads the
# partition again, `following.ReadAgain`, also when idle at its end, and for a writer with no accepted
# marker from where it began reading, not from its first message). Since then 170 runs of both cases
# passed on the development machine (120 of them two at a time, at load ~2), so any of the three
# fails the test again; when one happens, the test writes the reader's protocol state and every
# message of the result topic (`dump_topic`) beside the workers' logs.


@pytest.mark.parametrize("checkpoints,count", [(False, 2), (True, 3)], ids=["replay-2", "checkpoints-3"])
def test_mesh_workers_killed_at_random_points_end_equal_to_the_engine(kafka_broker, make_topic, tmp_path,
                                                                      checkpoints, count):
    rng = random.Random(int(time.time()))
    seed = rng.randrange(1000)
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, results, dead = make_topic("in", 4), make_topic("out", 2), make_topic("dead")
    rounds = stream(24, seed)
    want = oracle("reachability", rounds)
    final = T0 + 10 * len(rounds) * MS
    path = mesh_config(tmp_path, bootstrap, "reachability", count, source, results, dead)
    if checkpoints:
        path.write_text(path.read_text() + f'\n[checkpoint]\nlocation = "{tmp_path / "ckpt"}"\ninterval = "300ms"\n')
    workers = Supervised(path, count)
    kills = [rng.choice([*map(str, range(count)), "all"]), "all"]
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
            assert client.wait_for(T0 + 10 * MS, timeout=120), workers.log()  # both run: kill from now on
            sent.clear()
            feeder = threading.Thread(target=produce, args=(producer, 1, len(rounds)), daemon=True)
            feeder.start()
            for kill in kills:
                time.sleep(rng.uniform(1.0, 3.0))
                if kill == "all":
                    kill_all(workers)
                else:
                    workers.kill(int(kill))
            feeder.join(120)
            assert sent.is_set()
            for change in client.changes(timeout=240):
                expected = want.at(change.frontier - 1)
                if client.view != expected:
                    differ = sorted({r for r in {*client.view, *expected} if client.view.get(r) != expected.get(r)})
                    raise WrongView(f"seed {seed}: the view at {change.frontier} differs from the engine's: "
                                    + ", ".join(f"{r}: {client.view.get(r)} (engine {expected.get(r)})" for r in differ))
                if change.frontier >= final:
                    break
            if client.frontier is None or client.frontier < final:
                published = marked_to(results, bootstrap, count)
                assert published >= final, (f"seed {seed}: the workers marked up to {published}, the end is {final}",
                                             workers.log())
                raise ReaderStuck(f"seed {seed}: the reader stopped at {client.frontier} although every writer "
                                  f"marked every partition up to {published} (the end is {final})")
            assert client.view == want.at(final - 1) and client.view
    except BaseException as exc:  # the assertion's message is cut: every worker's whole log, for the record
        sys.stderr.write(f"seed {seed}, kills {kills}\n{workers.log(last=None)}\n")
        if isinstance(exc, (ProtocolError, WrongView, ReaderStuck)):
            sys.stderr.write(f"--- the reader\n{reader_state(client)}\n")
            sys.stderr.write(f"--- the result topic {results}\n{dump_topic(results, bootstrap)}\n")
        raise
    finally:
        codes = workers.stop()
    assert codes == [0] * count, (codes, workers.log())
    assert all(code == 1 for _, code in workers.exits), (workers.exits, workers.log())
    text = "".join("".join(lines) for lines in workers.logs)
    if checkpoints:  # the last kill (of all) came after checkpoints every worker completed
        restored = re.findall(rf"worker (\d) of {count}: restoring checkpoint checkpoint-\d+ at frontier (\d+)", text)
        assert {int(i) for i, _ in restored} == set(range(count)), workers.log()
        last = {int(i): int(f) for i, f in restored}  # each worker's last restore (a worker that exited 1
        assert len(set(last.values())) == 1, workers.log()  # made every worker restore again): the same frontier
        assert all((tmp_path / "ckpt" / f"worker-{i}").is_dir() for i in range(count))
    else:
        assert "restoring checkpoint" not in text
