"""A peer lost over the mesh is named by index and address in the worker's metric
``ddflow_mesh_peer_lost`` (scraped over HTTP: 1 for the lost peer, 0 for the others) and in its
``/readyz`` reason, which stays once the mesh is closed (the worker fails and exits)."""

from __future__ import annotations

import threading
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support.configs import VALID

from ddflow.config.loader import parse_config
from ddflow.daemon.cluster.mesh import MeshTransport, PeerLost
from ddflow.daemon.observe.health import EndpointServer
from ddflow.daemon.observe.metrics import DaemonMetrics
from ddflow.daemon.observe.snapshot import snapshot_from_stats
from ddflow.daemon.observe.stats import Stats
from ddflow.daemon.service import Service


def test_a_lost_peer_is_named_in_its_metric_and_in_readiness(tmp_path):
    addresses = [f"ipc://{tmp_path}/w{i}" for i in range(3)]
    ends = [MeshTransport(addresses, i, run="r", heartbeat=0.05, peer_timeout=0.5) for i in range(3)]
    try:
        starts = [threading.Thread(target=e.start) for e in ends]
        for t in starts:
            t.start()
        for t in starts:
            t.join(30)
        ends[2].close()  # gone: worker 1 still beats
        with pytest.raises(PeerLost, match=r"heard nothing from worker 2"):
            ends[0].gather(0, 0, True)
        ends[0].close()
        registry = CollectorRegistry()
        DaemonMetrics(registry, inputs={"edges": "reject"}, outputs=["reachable"], worker=0, workers=3,
                      snapshot=lambda: snapshot_from_stats(Stats(), topics={}, ready=False, exchange=ends[0]))
        with EndpointServer(registry, port=0) as server, urllib.request.urlopen(server.url + "/metrics") as r:
            text = r.read().decode()
        lost = {(s.labels["peer"], s.labels["address"]): s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name == "ddflow_mesh_peer_lost"}
        assert lost == {("1", addresses[1]): 0, ("2", addresses[2]): 1}
        config = parse_config(VALID + '\n[workers]\ncount = 3\nindex = 0\naddresses = "ipc:///tmp/w{index}"\n')
        service = Service(config)
        service.worker = SimpleNamespace(mesh=ends[0])
        assert service.ready() == (False, f"mesh peers lost: worker 2 ({addresses[2]}) (every worker exits 1 and "
                                          "all restart)")
    finally:
        ends[1].close()
