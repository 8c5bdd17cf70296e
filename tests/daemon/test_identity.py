"""Worker identity: ``[workers]`` in the config, ``--worker-index``, ``DDFLOW_WORKER_INDEX``, the host name."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from support.daemons import DDFLOW

from ddflow.config import ConfigError, load_config
from ddflow.daemon.cluster.identity import INDEX_ENV, with_identity, worker_identity


BASE = """
[dataflow]
function = "ddflow.config.dataflows:reachability"
args = { roots = [0] }

[kafka]
bootstrap = "127.0.0.1:1"

[[inputs]]
name = "edges"
topic = "edges"
fields = { src = "int", dst = "int" }

[[outputs]]
name = "reachable"
topic = "reachable"
"""


def config_with(tmp_path: Path, workers: str = ""):
    path = tmp_path / "daemon.toml"
    path.write_text(textwrap.dedent(BASE) + (f"\n[workers]\n{workers}\n" if workers else ""), encoding="utf-8")
    return load_config(path)


def error(tmp_path: Path, workers: str, **kwargs) -> ConfigError:
    config = config_with(tmp_path, workers)
    with pytest.raises(ConfigError) as info:
        worker_identity(config, **kwargs)
    return info.value


def test_defaults_one_worker(tmp_path: Path) -> None:
    config = config_with(tmp_path)
    assert (config.workers.count, config.workers.index) == (1, None)
    assert config.redacted()["workers"] == {"count": 1, "index": None, "wait_timeout_ns": 60 * 10**9, "addresses": [],
                                            "peer_timeout_ns": 10 * 10**9}
    # one worker: worker 0 whatever the environment or host name says
    assert worker_identity(config, environ={INDEX_ENV: "5"}, hostname="ddflow-7") == (0, 1)


def test_the_config_gives_the_index(tmp_path: Path) -> None:
    config = config_with(tmp_path, "count = 4\nindex = 2")
    assert worker_identity(config, environ={INDEX_ENV: "1"}, hostname="ddflow-3") == (2, 4)


def test_the_flag_overrides_the_config(tmp_path: Path) -> None:
    config = config_with(tmp_path, "count = 4\nindex = 2")
    assert worker_identity(config, flag=3, environ={INDEX_ENV: "1"}, hostname="ddflow-0") == (3, 4)
    assert worker_identity(config_with(tmp_path, "count = 1"), flag=0, environ={}) == (0, 1)


def test_then_the_environment_then_the_host_name(tmp_path: Path) -> None:
    config = config_with(tmp_path, "count = 4")
    assert worker_identity(config, environ={INDEX_ENV: " 1 "}, hostname="ddflow-3") == (1, 4)
    assert worker_identity(config, environ={}, hostname="ddflow-3") == (3, 4)
    assert worker_identity(config, environ={INDEX_ENV: ""}, hostname="my-ddflow-0") == (0, 4)
    # a pod's fully qualified name: only its first label is read
    assert worker_identity(config, environ={}, hostname="ddflow-2.ddflow.prod.svc.cluster.local") == (2, 4)


@pytest.mark.parametrize(("workers", "kwargs", "source", "words"), [
    ("count = 2", {"flag": 2}, "--worker-index", "gives worker 2, but workers.count is 2"),
    ("count = 2", {"flag": -1}, "--worker-index", "gives worker -1"),
    ("count = 3", {"environ": {INDEX_ENV: "x1"}}, INDEX_ENV, "'x1', not a worker index"),
    ("count = 3", {"environ": {INDEX_ENV: "3"}}, INDEX_ENV, "gives worker 3, but workers.count is 3"),
    ("count = 3", {"environ": {}, "hostname": "ddflow-9"}, "host name 'ddflow-9'", "gives worker 9"),
    ("count = 1", {"flag": 1}, "--worker-index", "workers.count is 1"),
])
def test_a_bad_index_names_its_source_and_the_key(tmp_path: Path, workers, kwargs, source, words) -> None:
    err = error(tmp_path, workers, **kwargs)
    assert err.keys == ["workers.index"] and err.source == source
    assert words in str(err)


def test_no_index_anywhere_is_an_error_naming_the_key(tmp_path: Path) -> None:
    err = error(tmp_path, "count = 2", environ={}, hostname="laptop")
    assert err.keys == ["workers.index"] and err.source == str(tmp_path / "daemon.toml")
    assert "--worker-index" in str(err) and INDEX_ENV in str(err) and "'laptop'" in str(err)


@pytest.mark.parametrize(("workers", "keys", "words"), [
    ("count = 0", ["workers.count"], "0 must be greater than 0"),
    ('count = "2"', ["workers.count"], "must be an integer"),
    ("count = 2\nindex = 2", ["workers.index"], "2 is not a worker of 2"),
    ("count = 2\nindex = -1", ["workers.index"], "-1 is not a worker of 2"),
    ("count = 2\nindx = 1", ["workers.indx"], "did you mean 'index'"),
])
def test_the_section_is_checked_by_key(tmp_path: Path, workers, keys, words) -> None:
    with pytest.raises(ConfigError) as info:
        config_with(tmp_path, workers)
    assert info.value.keys == keys and words in str(info.value)


def test_with_identity_records_the_resolved_index(tmp_path: Path) -> None:
    config = with_identity(config_with(tmp_path, "count = 3"), 1, 3)
    assert (config.workers.index, config.workers.count) == (1, 3)
    assert worker_identity(config, environ={INDEX_ENV: "2"}) == (1, 3)


def test_ddflow_run_resolves_the_index_before_connecting(tmp_path: Path) -> None:
    """``ddflow run`` reads ``--worker-index`` and the config; a bad index exits 2 naming the key."""
    config = tmp_path / "daemon.toml"
    config.write_text(textwrap.dedent(BASE) + "\n[workers]\ncount = 2\n", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HOSTNAME": "x"}
    bad = subprocess.run([DDFLOW, "run", "--config", str(config), "--worker-index", "5"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "--worker-index: workers.index: --worker-index gives worker 5" in bad.stderr
    help_text = subprocess.run([DDFLOW, "run", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "--worker-index I" in help_text and INDEX_ENV in " ".join(help_text.split())


def test_wait_timeout(tmp_path: Path) -> None:
    assert config_with(tmp_path, 'count = 2\nwait_timeout = "2m"').workers.wait_timeout_ns == 120 * 10**9
    with pytest.raises(ConfigError) as info:
        config_with(tmp_path, 'count = 2\nwait_timeout = "10ms"')
    assert info.value.keys == ["workers.wait_timeout"]
