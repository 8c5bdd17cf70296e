"""Fixtures of the deploy/ tests: rendered Kubernetes overlays, promtool, and a live scrape of the
daemon's /metrics that the dashboard and alert rules are checked against."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from deploy_support import KUBERNETES, exposed_samples, kustomize


@pytest.fixture(scope="session")
def base_docs() -> list[dict]:
    return kustomize(KUBERNETES / "base")


@pytest.fixture(scope="session")
def overlay_docs() -> list[dict]:
    return kustomize(KUBERNETES / "overlays" / "example")


# -- promtool --------------------------------------------------------------------------------------

def _apt_download(package: str, into: Path) -> Path | None:
    """``apt-get download`` a Debian package (refreshing the package lists once if needed)."""
    for attempt in range(2):
        result = subprocess.run(["apt-get", "download", package], cwd=into, capture_output=True, text=True,
                                timeout=300, check=False)
        debs = sorted(into.glob(f"{package}_*.deb"))
        if result.returncode == 0 and debs:
            return debs[-1]
        if attempt == 0 and os.geteuid() == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300, check=False)
    return None


@pytest.fixture(scope="session")
def promtool(request: pytest.FixtureRequest) -> str:
    """Prometheus's promtool: from PATH, else unpacked from Debian's ``prometheus`` package.

    The .deb is only unpacked (``dpkg-deb -x``) into the pytest cache, never installed, so no
    service is set up. Skips, saying why, only on a machine without apt (not Debian).
    """
    found = shutil.which("promtool")
    if found:
        return found
    cache = Path(request.config.cache.mkdir("ddflow-promtool"))
    binary = cache / "root" / "usr" / "bin" / "promtool"
    if not binary.is_file():
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            pytest.skip("PROMTOOL UNAVAILABLE: no promtool on PATH and no apt-get/dpkg-deb to fetch Debian's "
                        "'prometheus' package; the alert rules are still checked by the schema and PromQL tests")
        deb = _apt_download("prometheus", cache)
        if deb is None:
            pytest.fail("could not `apt-get download prometheus` (for promtool): check the Debian package sources")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache / "root")], check=True, timeout=300)
        deb.unlink()
    return str(binary)


# -- the daemon's metrics --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def daemon_scrape() -> Iterator[dict[str, str]]:
    """Sample name -> type from ``/metrics`` of the daemon's metrics server, fetched over HTTP.

    The registry is built as the daemon builds it for the base Kubernetes config: its inputs
    with their late policies, its outputs, every dead-letter reason, and the arrangements of the
    configured dataflow, built on a real engine; one assigned partition gives the lag series.
    """
    from ddflow.config import build_dataflow, load_config
    from ddflow.daemon.health import EndpointServer
    from ddflow.daemon.metrics import DaemonMetrics, MetricsSnapshot
    from ddflow.daemon.wire import REASONS
    from ddflow.operators import Dataflow

    config = load_config(KUBERNETES / "base" / "ddflow.toml")
    df = Dataflow()
    inputs = {spec.name: df.new_input(spec.name).collection for spec in config.inputs}
    build_dataflow(config, df, inputs)
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, inputs={i.name: i.late for i in config.inputs},
                            outputs=[o.name for o in config.outputs], dead_letter_reasons=sorted(REASONS),
                            arrangements=df.arrangement_stats)
    first = config.inputs[0]
    metrics.bind(lambda: MetricsSnapshot(consumer_lag={(first.topic, 0): 0}, ready=True))
    with EndpointServer(registry, host="127.0.0.1", port=0) as server:
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    yield exposed_samples(text)
