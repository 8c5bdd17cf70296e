"""``[workers] addresses``: a list or an ``{index}`` pattern of mesh addresses, each error naming the key."""

from __future__ import annotations

import pytest

from ddflow.config import ConfigError
from ddflow.config.loader import parse_config
from ddflow.daemon.cluster.identity import mesh_addresses
from support.configs import VALID



def workers(lines: str, extra: str = ""):
    return parse_config(VALID + "\n[workers]\n" + lines + "\n" + extra)


def test_a_pattern_is_filled_with_each_index_and_a_list_is_taken_as_given():
    got = workers('count = 3\naddresses = "tcp://ddflow-{index}.ddflow-mesh:7070"\npeer_timeout = "3s"').workers
    assert got.addresses == tuple(f"tcp://ddflow-{i}.ddflow-mesh:7070" for i in range(3))
    assert got.peer_timeout_ns == 3 * 10**9
    given = ["ipc:///run/ddflow/w0", "tcp://10.0.0.2:7071"]
    assert workers(f"count = 2\naddresses = {given!r}".replace("'", '"')).workers.addresses == tuple(given)
    assert workers("count = 2").workers.addresses == ()  # the default: see below


@pytest.mark.parametrize("lines,why", [
    ('count = 2\naddresses = ["tcp://a:1"]', "1 addresses for 2 workers"),
    ('count = 2\naddresses = "tcp://a:7070"', "a pattern names each worker by {index}"),
    ('count = 2\naddresses = ["tcp://a:1", "a:2"]', "'a:2' is neither tcp://HOST:PORT nor ipc://PATH"),
    ('count = 2\naddresses = ["tcp://a:1", "tcp://a:99999"]', "is neither"),
    ('count = 2\naddresses = ["tcp://a:1", "tcp://a:1"]', "two workers have the same address"),
    ('count = 2\naddresses = 7', "addresses"),
    ('count = 2\npeer_timeout = "10ms"', "must be at least 100ms"),
])
def test_bad_addresses_are_refused_naming_the_key(lines, why):
    with pytest.raises(ConfigError, match="workers.(addresses|peer_timeout)") as info:
        workers(lines)
    assert why in str(info.value)


def test_mesh_workers_take_checkpoints(tmp_path):
    config = workers('count = 2\naddresses = "ipc:///tmp/w{index}"', f'[checkpoint]\nlocation = "{tmp_path}"')
    assert config.workers.addresses and config.checkpoint.location == tmp_path


def test_without_addresses_several_workers_meet_at_one_host_sockets_named_by_their_group(tmp_path):
    config = parse_config(VALID.replace("[kafka]", '[kafka]\ngroup_id = "orders/eu 1"', 1) + "\n[workers]\ncount = 3\n")
    assert mesh_addresses(config, str(tmp_path)) == tuple(f"ipc://{tmp_path}/ddflow-orders_eu_1-mesh-{i}"
                                                          for i in range(3))
    assert mesh_addresses(workers("count = 1")) == ()  # one worker: no mesh
    given = workers('count = 2\naddresses = "tcp://h{index}:7070"')
    assert mesh_addresses(given, str(tmp_path)) == ("tcp://h0:7070", "tcp://h1:7070")


def test_a_default_address_too_long_for_a_unix_socket_names_the_key():
    with pytest.raises(ConfigError, match="workers.addresses") as info:
        mesh_addresses(workers("count = 2"), "/" + "d" * 100)
    assert "set workers.addresses" in str(info.value)
