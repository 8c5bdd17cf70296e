"""The demo's workload and its independent reference (breadth-first search) match the peers' figures."""

from __future__ import annotations

from ddflow.daemon.cli.demo import EdgeStream, LatencyTracker, reachable_pairs


def test_edge_stream_is_the_seed_workload_and_bfs_gives_the_published_counts() -> None:
    stream = EdgeStream(1000, 2000, seed=42, changes=2000)
    assert len(reachable_pairs(list(stream.initial()), range(10))) == 6595
    assert len(reachable_pairs(stream.window_after(2000), range(10))) == 7215
    removed, added = stream.change(5)
    assert removed == stream.edge(5) and added == stream.edge(2005)


def test_open_ended_stream_draws_more_edges_on_demand() -> None:
    stream = EdgeStream(50, 10, seed=1)
    far = stream.edge(200_000)
    assert all(0 <= n < 50 for n in far)
    assert len(stream.window_after(199_991)) == 10


def test_latency_tracker_counts_a_change_once_its_time_is_below_the_frontier() -> None:
    tracker = LatencyTracker()
    for t in (1_000, 2_000, 3_000):
        tracker.sent(t)
    tracker.final_below(2_000, now_ns=4_000)  # times < 2000 are final
    assert tracker.latencies == [3e-6]
    tracker.final_below(None, now_ns=5_000)  # closed: everything is final
    assert tracker.latencies == [3e-6, 3e-6, 2e-6]
    assert tracker.pending == []


def test_the_changes_start_only_once_the_initial_graph_is_final() -> None:
    """A change sent while the daemon still computes the initial graph waits behind it: the first
    changes' latencies were the initial computation's (~0.3-0.7 s on 1k/2k, the whole p99 of a
    300-change run), not their own. The generator sends none before ``initial_final`` is set."""
    import threading
    import time

    from ddflow.daemon.cli.demo import _Generator

    seen: list[tuple[str, bool]] = []
    generator: _Generator | None = None

    class Producer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def insert(self, edge, t):
            seen.append(("insert", generator.initial_final.is_set()))

        def remove(self, edge, t):
            seen.append(("remove", generator.initial_final.is_set()))

        def advance_to(self, t):
            pass

        def flush(self):
            pass

    generator = _Generator(EdgeStream(50, 20, seed=3, changes=5), Producer, LatencyTracker(), rate=0,
                           max_changes=5, resolution_ns=1_000_000)
    thread = threading.Thread(target=generator.run, daemon=True)
    thread.start()
    while generator.initial_time == 0:
        time.sleep(0.01)
    time.sleep(0.3)  # a generator that does not wait has sent its changes by now
    generator.initial_final.set()
    thread.join(30)
    assert generator.error is None and generator.changes == 5
    assert seen[:20] == [("insert", False)] * 20  # the initial graph, before anything is final
    assert len(seen) == 30 and all(final for _, final in seen[20:])  # every change after it
