"""``[workers] addresses``: a list or an ``{index}`` pattern of mesh addresses, each error naming the key."""

from __future__ import annotations

import pytest

from ddflow.config import ConfigError
from ddflow.config.loader import parse_config
from support.configs import VALID



def workers(lines: str, extra: str = ""):
    return parse_config(VALID + "\n[workers]\n" + lines + "\n" + extra)


def test_a_pattern_is_filled_with_each_index_and_a_list_is_taken_as_given():
    got = workers('count = 3\naddresses = "tcp://ddflow-{index}.ddflow-mesh:7070"\npeer_timeout = "3s"').workers
    assert got.addresses == tuple(f"tcp://ddflow-{i}.ddflow-mesh:7070" for i in range(3))
    assert got.peer_timeout_ns == 3 * 10**9
    given = ["ipc:///run/ddflow/w0", "tcp://10.0.0.2:7071"]
    assert workers(f"count = 2\naddresses = {given!r}".replace("'", '"')).workers.addresses == tuple(given)
    assert workers("count = 2").workers.addresses == ()  # the exchange topics


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
