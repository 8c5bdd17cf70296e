"""Fixtures of the deploy/ tests: rendered Kubernetes overlays, promtool, and a live daemon run
as the pod runs it, whose /metrics scrape the dashboard and alert rules are checked against."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_support import EDGE_TIMES, KUBERNETES, PROGRESS, LiveDaemon, exposed_samples, kustomize
from support.broker import create_topic
from support.daemons import free_port
from support.locks import machine_lock

from ddflow.daemon.kafka.broker import EmbeddedBroker


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
def promtool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Prometheus's promtool: from PATH, else unpacked from Debian's ``prometheus`` package.

    The .deb is only unpacked (``dpkg-deb -x``) into the pytest cache, never installed, so no
    service is set up. Skips, saying why, only on a machine without apt (not Debian).
    """
    found = shutil.which("promtool")
    if found:
        return found
    cache_plugin = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache = Path(cache_plugin.mkdir("ddflow-promtool")) if cache_plugin else tmp_path_factory.mktemp("promtool")
    binary = cache / "root" / "usr" / "bin" / "promtool"
    with machine_lock("promtool"):  # the cache is shared by the suite's processes: one unpacks it
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


# -- a live daemon, run as the Kubernetes pod runs it ----------------------------------------------

@pytest.fixture(scope="session")
def live_daemon(kafka_broker: EmbeddedBroker, base_docs: list[dict],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    """``ddflow run`` started with the StatefulSet's command and the rendered ConfigMap's config,
    on the real broker, fed edges and a progress marker until ``/readyz`` answers 200.

    What differs from the pod is only what must differ on a shared test machine: fresh topic
    names, the checkpoint directory, and loopback addresses given through the environment
    variables the CLI reads (``KAFKA_BOOTSTRAP``, ``DDFLOW_METRICS_ADDRESS``).
    """
    objects = {doc["kind"]: doc for doc in base_docs}
    (container,) = objects["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    workdir = tmp_path_factory.mktemp("live-daemon")
    text = objects["ConfigMap"]["data"]["ddflow.toml"]
    suffix = uuid.uuid4().hex[:8]
    topics = {}
    for topic in re.findall(r'^topic = "([^"]+)"$', text, flags=re.M):
        topics[topic] = create_topic(kafka_broker.bootstrap, f"deploy-{topic}-{suffix}")
        text = text.replace(f'topic = "{topic}"', f'topic = "{topics[topic]}"')
    checkpoint = 'location = "/var/lib/ddflow/checkpoints"'
    assert text.count(checkpoint) == 1
    text = text.replace(checkpoint, f'location = "{workdir / "checkpoints"}"')
    config = workdir / "ddflow.toml"
    config.write_text(text)

    entrypoint = str(Path(sys.executable).parent / "ddflow")  # the image's ENTRYPOINT ["ddflow"]
    argv = [entrypoint] + [str(config) if a == "/etc/ddflow/ddflow.toml" else a for a in container["args"]]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_"))}
    env |= {"KAFKA_BOOTSTRAP": kafka_broker.bootstrap, "DDFLOW_METRICS_ADDRESS": f"127.0.0.1:{port}"}
    log = workdir / "ddflow.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    daemon = LiveDaemon(process, f"http://127.0.0.1:{port}", log, container)
    try:
        daemon.wait_for("/healthz")
        edges = "\n".join(f"[[{i}, {i + 1}], {EDGE_TIMES[i]}, 1]" for i in range(len(EDGE_TIMES)))
        edges += f'\n{{"progress": {PROGRESS}}}\n'
        produced = subprocess.run([entrypoint, "produce", "--topic", topics["edges"], "--bootstrap",
                                   kafka_broker.bootstrap], input=edges, capture_output=True, text=True,
                                  timeout=60, env=env)
        assert produced.returncode == 0, produced.stderr
        daemon.wait_for("/readyz")
        yield daemon
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture(scope="session")
def daemon_scrape(live_daemon: LiveDaemon) -> dict[str, str]:
    """Sample name -> type of the series in a scrape of the live daemon's ``/metrics``."""
    # Consumer lag comes from the watermarks of fetch responses, refreshed about once a second
    # after the partitions are assigned: scrape until it is there too (bounded).
    deadline = time.monotonic() + 60
    while True:
        status, text = live_daemon.get("/metrics")
        assert status == 200, text
        samples = exposed_samples(text)
        if "ddflow_consumer_lag_messages" in samples or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)
