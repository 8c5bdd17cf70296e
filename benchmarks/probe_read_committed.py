"""Probe: does a broker show every committed transaction to ``read_committed`` consumers when
transactional producers are killed at random points?

Two transactional ids each run a producer process that commits small transactions (three records on
each of two partitions) as fast as it can; every ``--rounds`` both are SIGKILLed after a random
0.6-2 s and started again under the same ids (each start fences the previous one). A live consumer of
each isolation level reads throughout. At the end, fresh consumers of each level read the topic, and
``read_committed`` once more after ``--settle`` seconds. It prints, per reader, how many records of
transactions whose ``commit_transaction`` returned it never got (the ``read_uncommitted`` readers are
the baseline: they must miss none).

On the embedded broker (tansu, the `ddflow broker`), 2 runs of 8 at 20 rounds showed
``read_committed`` readers, live and fresh, missing 48 and 108 committed records for good, while the
``read_uncommitted`` ones missed none: that is why `ddflow.daemon.kafka.results.ResultClient` reads
uncommitted records. Usage: ``.venv/bin/python benchmarks/probe_read_committed.py --rounds 20 --seed 34``
(the embedded broker; ``--bootstrap HOST:PORT`` for another).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import threading
import time
import uuid
from contextlib import nullcontext

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCER = r'''
import sys
from confluent_kafka import Producer
bootstrap, topic, tid, tag = sys.argv[1:5]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "enable.idempotence": True, "linger.ms": 5})
p.init_transactions(30)
t = 0
while True:
    p.begin_transaction()
    for part in (0, 1):
        for i in range(3):
            p.produce(topic, f"{tag}:{t}:{part}:{i}".encode(), partition=part)
    p.commit_transaction(30)
    print("committed", t, flush=True)
    t += 1
'''


def consumer(bootstrap: str, topic: str, level: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": level, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    return c


def read_to_end(bootstrap: str, topic: str, level: str) -> set[str]:
    c, got, ends, start = consumer(bootstrap, topic, level), set(), set(), time.monotonic()
    while len(ends) < 2 and time.monotonic() - start < 30:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error():
            ends.add(m.partition())
        else:
            got.add(m.value().decode())
    c.close()
    return got


def run(bootstrap: str, rounds: int, rng: random.Random, settle: float) -> None:
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(10)
    live: dict[str, set[str]] = {"read_committed": set(), "read_uncommitted": set()}
    stop = threading.Event()

    def follow(level: str) -> None:
        c = consumer(bootstrap, topic, level)
        while not stop.is_set():
            m = c.poll(0.02)
            if m is not None and not m.error():
                live[level].add(m.value().decode())
        c.close()

    readers = [threading.Thread(target=follow, args=(level,)) for level in live]
    for r in readers:
        r.start()
    committed: set[tuple[str, int]] = set()

    def produce(tid: str, tag: str, lifetime: float) -> None:
        child = subprocess.Popen([sys.executable, "-c", PRODUCER, bootstrap, topic, tid, tag],
                                 stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        pump = threading.Thread(target=lambda: lines.extend(child.stdout))
        pump.start()
        time.sleep(lifetime)
        child.kill()
        child.wait()
        pump.join()
        committed.update((tag, int(line.split()[1])) for line in lines if line.startswith("committed"))

    tids = [f"probe-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for r in range(rounds):
        threads = [threading.Thread(target=produce, args=(tid, f"{tid}-r{r}", rng.uniform(0.6, 2.0))) for tid in tids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    time.sleep(3)
    stop.set()
    for r in readers:
        r.join()
    records = {f"{tag}:{t}:{part}:{i}" for tag, t in committed for part in (0, 1) for i in range(3)}
    print(f"{len(committed)} transactions committed ({len(records)} records), {rounds} kills of each of 2 producers")
    for level, got in live.items():
        print(f"  live {level}: {len(records - got)} committed records never read")
    for level in live:
        print(f"  fresh {level}: {len(records - read_to_end(bootstrap, topic, level))} committed records not read")
    time.sleep(settle)
    print(f"  fresh read_committed after {settle:g} s more: "
          f"{len(records - read_to_end(bootstrap, topic, 'read_committed'))} committed records not read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=70.0)
    parser.add_argument("--bootstrap", help="a broker's bootstrap servers (default: the embedded broker)")
    args = parser.parse_args()
    if args.bootstrap:
        broker = nullcontext(None)
    else:
        from ddflow.daemon.kafka.broker import EmbeddedBroker

        broker = EmbeddedBroker(use_environment=False)
    with broker as b:
        run(args.bootstrap or b.bootstrap, args.rounds, random.Random(args.seed), args.settle)


if __name__ == "__main__":
    main()
