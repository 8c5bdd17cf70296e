"""``ddflow demo``: graph reachability over a sliding window of edges, live, in one command.

The demo starts the embedded broker (or uses ``KAFKA_BOOTSTRAP``), runs the daemon on the
``reachability.toml`` example (ten roots over an ``edges`` topic), and feeds it the seed workload
of the 2016 roadmap: a random graph of ``--edges`` edges over ``--nodes`` nodes, then changes that
each remove the oldest edge and add a new one, every change at its own nanosecond time (the wall
clock when it is sent); the changes start once the initial graph's output is final, so that a
change's latency is its own path through the pipeline, not a wait behind the initial computation
(reported on its own). A result client follows the ``reachable`` topic; the terminal shows the
number of nodes each root reaches and a progress line (changes sent, output frontier, end-to-end
latency from a change being sent to its output being final). At the end the final view is
checked against a breadth-first search over the final window, done here independently of the
engine, and the p50/p99 latency is printed.

The edge stream is ``numpy.random.default_rng(seed).integers(0, nodes, (edges + changes, 2))``:
edges ``0..M-1`` form the initial graph and change ``k`` removes edge ``k`` and adds ``M+k``, as in
the peers' measurements (6,595 reachable pairs initially on 1k/2k, 7,215 after 2,000 changes).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

__all__ = ["EdgeStream", "reachable_pairs", "LatencyTracker", "LiveView", "run_demo"]

CHUNK = 65_536  # edges drawn from the generator at a time when the number of changes is open


class EdgeStream:
    """The sliding-window edge sequence: ``edge(i)`` for i = 0, 1, ... drawn in chunks."""

    def __init__(self, nodes: int, window: int, *, seed: int = 42, changes: int | None = None) -> None:
        if nodes <= 0 or window <= 0:
            raise ValueError(f"demo graph: nodes ({nodes}) and edges ({window}) must be positive")
        self.nodes = nodes
        self.window = window
        self._rng = np.random.default_rng(seed)
        first = window + (changes if changes is not None else CHUNK)
        self._edges = self._rng.integers(0, nodes, (first, 2))

    def edge(self, i: int) -> tuple[int, int]:
        while i >= len(self._edges):
            self._edges = np.concatenate([self._edges, self._rng.integers(0, self.nodes, (CHUNK, 2))])
        src, dst = self._edges[i]
        return int(src), int(dst)

    def initial(self) -> Iterator[tuple[int, int]]:
        return (self.edge(i) for i in range(self.window))

    def change(self, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """Change ``k``: (edge removed, edge added)."""
        return self.edge(k), self.edge(self.window + k)

    def window_after(self, changes: int) -> list[tuple[int, int]]:
        return [self.edge(i) for i in range(changes, changes + self.window)]


def reachable_pairs(edges: list[tuple[int, int]], roots: range) -> set[tuple[int, int]]:
    """``(root, node)`` pairs by breadth-first search: the reference the demo checks against."""
    adjacency: dict[int, set[int]] = defaultdict(set)
    for src, dst in edges:
        adjacency[src].add(dst)
    pairs: set[tuple[int, int]] = set()
    for root in roots:
        seen = {root}
        frontier = [root]
        while frontier:
            nxt = []
            for node in frontier:
                for succ in adjacency[node]:
                    if succ not in seen:
                        seen.add(succ)
                        nxt.append(succ)
            frontier = nxt
        pairs.update((root, node) for node in seen)
    return pairs


@dataclass
class LatencyTracker:
    """Send time (= data time) of each change; when the output frontier passes it, the change is final."""

    pending: list[int] = field(default_factory=list)  # data times (ns), increasing
    latencies: list[float] = field(default_factory=list)  # seconds
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, t: int) -> None:
        with self._lock:
            self.pending.append(t)

    def waiting(self) -> int:
        with self._lock:
            return len(self.pending)

    def final_below(self, frontier: int | None, now_ns: int) -> None:
        with self._lock:
            cut = len(self.pending) if frontier is None else int(np.searchsorted(self.pending, frontier, "left"))
            done, self.pending = self.pending[:cut], self.pending[cut:]
        self.latencies.extend((now_ns - t) / 1e9 for t in done)

    def percentiles(self, *qs: float) -> list[float | None]:
        if not self.latencies:
            return [None for _ in qs]
        values = np.percentile(np.asarray(self.latencies), qs)
        return [float(v) for v in values]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


class LiveView:
    """The terminal view: reach per root, and a progress line; redrawn in place on a terminal."""

    def __init__(self, roots: range, *, out: TextIO = sys.stdout, quiet: bool = False) -> None:
        self.roots = roots
        self.out = out
        self.quiet = quiet
        self.tty = out.isatty() and not quiet
        self._drawn = 0
        self._last = 0.0

    def due(self) -> bool:
        """Time to redraw (10 per second on a terminal, one line per second otherwise)?"""
        return not self.quiet and time.monotonic() - self._last >= (0.1 if self.tty else 1.0)

    def render(self, reach: Counter[int], status: str) -> None:
        if not self.due():
            return
        self._last = time.monotonic()
        if not self.tty:
            print(status, file=self.out, flush=True)
            return
        width = shutil.get_terminal_size((100, 20)).columns
        most = max(reach.values(), default=0) or 1
        lines = ["nodes reachable from each root (live, exact at the output frontier):"]
        for root in self.roots:
            bar = "#" * max(0, int((width - 24) * reach.get(root, 0) / most))
            lines.append(f"  root {root:>3} {reach.get(root, 0):>7} {bar}")
        lines.append(status[:width])
        clear = f"\x1b[{self._drawn}F" if self._drawn else ""
        self.out.write(clear + "".join(f"\x1b[2K{line}\n" for line in lines))
        self.out.flush()
        self._drawn = len(lines)


@dataclass
class _Generator:
    """Sends the initial graph, waits until its output is final (``initial_final``, set by whoever
    follows the result topic), then one change per tick at ``rate``/s, each at its own time."""

    stream: EdgeStream
    producer_factory: Callable[[], Any]  # -> UpdateProducer; made and closed in the generator's thread
    tracker: LatencyTracker
    rate: float
    max_changes: int | None
    resolution_ns: int
    max_pending: int = 1000
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    changes: int = 0
    last_time: int = 0  # data time of the last update sent: the run is final once the frontier passes it
    error: BaseException | None = None
    finished: float = 0.0
    producer: Any = None
    promised: int = 0  # the last progress marker sent
    initial_time: int = 0  # the initial graph's time (0: not sent yet)
    initial_sent: float = 0.0  # monotonic seconds when it was sent
    initial_final: threading.Event = field(default_factory=threading.Event)

    def _now(self, after: int) -> int:
        """The next change's time: the wall clock, after the previous one and the progress promised."""
        return max(time.time_ns(), after + 1, self.promised)

    def run(self) -> None:
        try:
            with self.producer_factory() as self.producer:
                self._generate()
        except BaseException as exc:
            self.error = exc
        finally:
            self.producer = None
            self.finished = time.monotonic()
            self.done.set()

    def _generate(self) -> None:
        t = self._now(0)
        for edge in self.stream.initial():
            self.producer.insert(edge, t)
        self.last_time = t
        self._advance(t)
        self.initial_sent = time.monotonic()
        self.initial_time = t
        while not self.stop.is_set() and not self.initial_final.wait(0.05):
            pass  # the changes are measured against the computed initial graph
        started = time.monotonic()
        while not self.stop.is_set() and (self.max_changes is None or self.changes < self.max_changes):
            due = self.changes + self.max_pending if self.rate <= 0 else \
                int((time.monotonic() - started) * self.rate) + 1
            if self.max_changes is not None:
                due = min(due, self.max_changes)
            # open loop at `rate`, but never more than `max_pending` changes waiting to be final
            due = min(due, self.changes + max(0, self.max_pending - self.tracker.waiting()))
            batch = 0
            while self.changes < due and batch < 1000:
                removed, added = self.stream.change(self.changes)
                t = self._now(t)
                self.producer.remove(removed, t)
                self.producer.insert(added, t)
                self.tracker.sent(t)
                self.last_time = t
                self.changes += 1
                batch += 1
            if batch:
                self._advance(t)
            else:
                self.stop.wait(0.005 if self.rate <= 0 else min(0.005, 1.0 / self.rate))
        self._advance(t)

    def _advance(self, t: int) -> None:
        """Promise the rest of ``t``'s epoch: with fixed epochs the daemon can then close it at once
        instead of waiting for a later change to cross the boundary (later changes get later times)."""
        self.promised = (t // self.resolution_ns + 1) * self.resolution_ns
        self.producer.advance_to(self.promised)
        self.producer.flush()


def _demo_config(args: argparse.Namespace, bootstrap: str, run_id: str) -> Any:
    """The reachability example, on this run's own topics (a shared broker may hold old ones)."""
    from dataclasses import replace

    from ...config import DataflowConfig, MetricsConfig, example_paths, load_config, parse_address

    path = next(p for p in example_paths() if p.name == "reachability.toml")
    config = load_config(path)
    host, port = parse_address(args.metrics_address)
    prefix = f"ddflow-demo-{run_id}"
    return replace(
        config,
        dataflow=DataflowConfig(config.dataflow.function, {"roots": list(range(args.roots))}, config.dataflow.path),
        kafka=replace(config.kafka.with_bootstrap(bootstrap), group_id=prefix),
        inputs=tuple(replace(i, topic=f"{prefix}-{i.topic}") for i in config.inputs),
        outputs=tuple(replace(o, topic=f"{prefix}-{o.topic}") for o in config.outputs),
        dead_letter_topic=f"{prefix}-dead-letters",
        metrics=MetricsConfig(host, port),
    )


def run_demo(args: argparse.Namespace, *, out: TextIO = sys.stdout) -> int:
    """The ``ddflow demo`` command (see the module docstring); returns the exit code."""
    import contextlib
    import uuid

    from ..kafka.broker import EmbeddedBroker
    from .signals import on_signals
    from ..kafka.client import ensure_topics
    from ..kafka.producer import UpdateProducer
    from ..kafka.results import ResultClient
    from ..service import Service
    from ...operators.lattice import T_MIN

    roots = range(args.roots)
    stream = EdgeStream(args.nodes, args.edges, seed=args.seed, changes=args.max_updates)
    tracker = LatencyTracker()
    view = LiveView(roots, out=out, quiet=args.quiet)
    interrupts: list[float] = []  # Ctrl-C once: stop sending and wait for the output; twice: quit now
    with contextlib.ExitStack() as stack:
        if args.bootstrap:
            bootstrap = args.bootstrap
            print(f"broker: {bootstrap} (from --bootstrap/KAFKA_BOOTSTRAP)", file=out, flush=True)
        else:
            broker = stack.enter_context(EmbeddedBroker(use_environment=False))
            bootstrap = broker.bootstrap
            print(f"broker: embedded tansu at {bootstrap}", file=out, flush=True)
        config = _demo_config(args, bootstrap, uuid.uuid4().hex[:8])
        options = config.client_options()
        edges_topic, result_topic = config.inputs[0].topic, config.outputs[0].topic
        ensure_topics(options, {edges_topic: 1, result_topic: 1, config.dead_letter_topic: 1})

        service = Service(config)
        stack.callback(service.close)
        server = service.serve()
        print(f"metrics: {server.url}/metrics  health: {server.url}/healthz  ready: {server.url}/readyz",
              file=out, flush=True)
        daemon = threading.Thread(target=_quietly(service.run), name="ddflow-daemon", daemon=True)
        daemon.start()
        stack.callback(daemon.join, 60)
        stack.callback(service.stop)

        generator = _Generator(stream, lambda: UpdateProducer(edges_topic, options), tracker, args.rate,
                               args.max_updates,
                               config.epoch.resolution_ns or 1, max_pending=args.max_pending)
        feeder = threading.Thread(target=generator.run, name="ddflow-demo-generator", daemon=True)
        stack.enter_context(on_signals(lambda: interrupts.append(time.monotonic())))
        feeder.start()

        results = stack.enter_context(ResultClient(result_topic, options))
        reach: Counter[int] = Counter()
        started = time.monotonic()
        deadline = None if args.duration is None else started + args.duration
        frontier: int | None = T_MIN
        initial_ms: float | None = None
        while True:
            for change in results.poll(0.1):
                frontier = change.frontier
                tracker.final_below(frontier, time.time_ns())
                for (root, _node), _t, diff in change.updates:
                    reach[root] += diff
            if initial_ms is None and generator.initial_time and _final(frontier, generator.initial_time):
                initial_ms = (time.monotonic() - generator.initial_sent) * 1e3
                generator.initial_final.set()
            if (interrupts or (deadline is not None and time.monotonic() >= deadline)) \
                    and not generator.stop.is_set():
                generator.stop.set()
                if interrupts:
                    print("\nstopping: waiting for the last changes to be final (Ctrl-C again to quit now)",
                          file=out, flush=True)
            if len(interrupts) > 1 or generator.error is not None or service.failure is not None:
                break
            if generator.done.is_set() and _final(frontier, generator.last_time):
                break
            if generator.done.is_set() and time.monotonic() - generator.finished > args.catch_up:
                break  # the daemon did not catch up in time: reported below
            if view.due():
                elapsed = time.monotonic() - started
                p50, p99 = tracker.percentiles(50, 99)
                view.render(reach, f"{elapsed:6.1f} s | changes sent {generator.changes:,} "
                                   f"({generator.changes / max(elapsed, 1e-9):,.0f}/s) | final "
                                   f"{len(tracker.latencies):,} | pairs {sum(reach.values()):,} | latency p50 "
                                   f"{_ms(p50)} p99 {_ms(p99)} | {server.url}/metrics")
        if len(interrupts) > 1:
            print(f"interrupted: {generator.changes:,} changes sent, {len(tracker.latencies):,} final; "
                  "no final check", file=out, flush=True)
            return 130
        generator.stop.set()  # (a generator still waiting for the initial graph stops waiting)
        feeder.join(30)
        if initial_ms is not None:
            print(f"initial graph: {stream.window:,} edges final after {initial_ms:,.0f} ms", file=out)
        return _summary(out, generator, service, tracker, results.view, reach, stream, roots, frontier)


def _summary(out: TextIO, generator: _Generator, service: Any, tracker: LatencyTracker,
             final_view: dict[Any, int], live: Counter[int], stream: EdgeStream, roots: range,
             frontier: int | None) -> int:
    if generator.error is not None:
        print(f"demo: the generator failed: {generator.error}", file=out)
        return 1
    if service.failure is not None:
        print(f"demo: the daemon failed: {service.failure}", file=out)
        return 1
    caught_up = _final(frontier, generator.last_time)
    expected = reachable_pairs(stream.window_after(generator.changes), roots)
    got = {record for record, count in final_view.items() if count == 1}
    per_root = Counter(root for root, _node in got)
    consistent = +live == per_root  # the live counts, summed from the changes, agree with the view
    exact = caught_up and consistent and got == expected and all(c == 1 for c in final_view.values())
    p50, p99 = tracker.percentiles(50, 99)
    print(f"changes: {generator.changes:,} edge changes over a window of {stream.window:,} edges "
          f"on {stream.nodes:,} nodes, {len(roots)} roots", file=out)
    print(f"reachable pairs at the final frontier: {len(got):,}", file=out)
    if exact:
        print(f"check: the result view equals a breadth-first search over the final window: OK "
              f"({len(expected):,} pairs)", file=out)
    elif not caught_up:
        print(f"check: FAILED: the output frontier {frontier} did not pass the last update's time "
              f"{generator.last_time} (try a larger --catch-up)", file=out)
    elif not consistent:
        print(f"check: FAILED: the live counts {dict(live)} disagree with the final view {dict(per_root)}", file=out)
    else:
        print(f"check: FAILED: {len(got - expected)} unexpected pairs, {len(expected - got)} missing", file=out)
    print(f"end-to-end latency (change sent -> its output final on the result topic): p50 {_ms(p50)}, "
          f"p99 {_ms(p99)} over {len(tracker.latencies):,} changes", file=out, flush=True)
    return 0 if exact else 1


def _final(frontier: int | None, last_time: int) -> bool:
    """Every update sent is final once the output frontier (None: closed) is past the last one's time."""
    return last_time > 0 and (frontier is None or frontier > last_time)


def _quietly(run: Callable[[], None]) -> Callable[[], None]:
    """The daemon thread's target: a failure is kept on the service and reported by the demo."""
    def target() -> None:
        try:
            run()
        except BaseException:  # noqa: BLE001 (recorded in service.failure)
            pass

    return target
