"""Which worker of how many this process is: ``worker_identity(config, flag, environ, hostname)``.

``workers.count`` (default 1) worker processes share one dataflow; worker ``index`` owns the keys
whose stable hash modulo ``count`` is ``index`` and reads the input partitions ``p`` with
``p % count == index``. The index is resolved once, at start, by the first of:

1. ``ddflow run --worker-index I`` (``flag``);
2. ``workers.index`` in the config file;
3. when ``count > 1``: the environment variable ``DDFLOW_WORKER_INDEX`` (a systemd template unit
   sets it from its instance name, ``%i``);
4. when ``count > 1``: the host name's trailing ``-N`` (a StatefulSet pod ``ddflow-3`` is worker 3;
   only the first label of a dotted name is read);
5. ``count == 1``: worker 0.

An index that is not an integer in ``[0, count)``, or no index at all when ``count > 1``, is a
`ConfigError` naming ``workers.index`` (its source is the flag, the variable or the host name that
gave the bad value, else the config file). A caller may assume the returned pair satisfies
``0 <= index < count``.

Where each worker listens on the mesh: ``mesh_addresses(config)`` is ``workers.addresses`` when the
config gives them, else, for several workers on one host, ``ipc://<tmp>/ddflow-<group>-mesh-<i>``
(``<tmp>``: ``TMPDIR`` or the system's temporary directory, ``<group>``: ``kafka.group_id`` with
characters other than letters, digits, ``.``, ``_`` and ``-`` written ``_``). The default reaches
only workers on the same host that share that directory: workers on several hosts, in separate
containers or under systemd's ``PrivateTmp`` need ``workers.addresses``.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Mapping

from ...config import Config, ConfigError

__all__ = ["INDEX_ENV", "mesh_addresses", "worker_identity", "with_identity"]

INDEX_ENV = "DDFLOW_WORKER_INDEX"

_ORDINAL = re.compile(r"-(\d+)$")
_KEY = "workers.index"
_IPC_PATH_MAX = 103  # a Unix socket path's bytes (sun_path holds 104 on macOS, 108 on Linux, with its NUL)


def worker_identity(config: Config, flag: int | str | None = None, environ: Mapping[str, str] = os.environ,
                    hostname: str | None = None) -> tuple[int, int]:
    """``(index, count)`` of this worker (see the module's docstring for the order of sources)."""
    count = config.workers.count
    if flag is not None:
        return _checked(flag, count, "--worker-index", "--worker-index"), count
    if config.workers.index is not None:
        return _checked(config.workers.index, count, str(config.source), "workers.index"), count
    if count == 1:
        return 0, 1
    value = environ.get(INDEX_ENV, "").strip()
    if value:
        return _checked(value, count, INDEX_ENV, f"environment variable {INDEX_ENV}"), count
    host = socket.gethostname() if hostname is None else hostname
    match = _ORDINAL.search(host.split(".", 1)[0])
    if match is not None:
        return _checked(match.group(1), count, f"host name {host!r}", f"host name {host!r}"), count
    raise ConfigError.one(config.source, _KEY, f"workers.count is {count} but this worker's index is not given: set "
                          f"workers.index, ddflow run --worker-index I, the environment variable {INDEX_ENV}, or run "
                          f"on a host named NAME-I (a StatefulSet pod); the host name {host!r} ends in no -I")


def mesh_addresses(config: Config, directory: str | None = None) -> tuple[str, ...]:
    """Every worker's mesh address, by index (see the module): ``workers.addresses``, else the
    one-host default under ``directory`` (the temporary directory when None). A default path too
    long for a Unix socket is a `ConfigError` naming ``workers.addresses``."""
    count = config.workers.count
    if config.workers.addresses or count == 1:
        return tuple(config.workers.addresses)
    group = re.sub(r"[^A-Za-z0-9._-]", "_", config.kafka.group_id)
    base = os.path.join(tempfile.gettempdir() if directory is None else directory, f"ddflow-{group}-mesh-")
    if len(base.encode()) + len(str(count - 1)) > _IPC_PATH_MAX:
        raise ConfigError.one(config.source, "workers.addresses", f"workers.count is {count} and no addresses are "
                              f"given; the default ipc://{base}<index> is longer than a Unix socket path may be "
                              f"({_IPC_PATH_MAX} bytes): set workers.addresses (or a shorter kafka.group_id or TMPDIR)")
    return tuple(f"ipc://{base}{i}" for i in range(count))


def with_identity(config: Config, index: int, count: int) -> Config:
    """``config`` with ``workers.index``/``workers.count`` set to a resolved identity."""
    from dataclasses import replace

    return replace(config, workers=replace(config.workers, index=index, count=count))


def _checked(value: int | str, count: int, source: str, what: str) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"\d+", text):
            raise ConfigError.one(source, _KEY, f"{what} gives {value!r}, not a worker index (an integer >= 0)")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise ConfigError.one(source, _KEY, f"{what} gives worker {value!r}, but workers.count is {count} "
                              f"(0 <= index < {count})")
    return value
