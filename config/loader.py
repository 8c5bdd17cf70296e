"""Load a TOML config file into ``Config``, collecting every problem with its key.

The loader walks the document section by section (`streams` reads the inputs and outputs) with a
`table.Table` reader that knows its dotted path, records which keys it consumed, and reports
unknown keys (with a close match, so typos are obvious). Nothing stops at the first problem: the whole file is checked and one ``ConfigError``
lists everything wrong, each line ``FILE: KEY: PROBLEM``.

Example::

    [dataflow]
    function = "ddflow.daemon.cli.demo:reachability"

    [kafka]
    bootstrap = "127.0.0.1:9092"

    [[inputs]]
    name = "edges"
    topic = "edges"
    fields = { src = "int", dst = "int" }

    [[outputs]]
    name = "reachable"
    topic = "reachable"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .errors import ConfigError, Problem
from .schema import (
    CheckpointConfig,
    Config,
    DataflowConfig,
    EpochConfig,
    KafkaConfig,
    MetricsConfig,
    WorkerConfig,
    WorkersConfig,
)
from .secrets import SecretRef, is_inline_refused
from .streams import read_input, read_output
from .table import (
    Table,
    check_bootstrap,
    check_choice,
    check_nonempty,
    check_positive,
    check_reference,
    check_strings,
    check_topic,
    check_unique,
    describe,
    parse_address,
)

__all__ = ["load_config", "parse_config"]

def load_config(path: str | Path) -> Config:
    """Read and validate ``path``. Raises ``ConfigError`` naming the file and every bad key."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError.one(path, "(file)", f"cannot read the config file: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.one(path, "(file)", f"not UTF-8 text: {exc}") from exc
    return parse_config(text, path)


def parse_config(text: str, source: str | Path = "<string>") -> Config:
    """Validate TOML ``text``; relative paths in it resolve against ``source``'s directory."""
    source = Path(source)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError.one(source, "(syntax)", f"not valid TOML: {exc}") from exc
    problems: list[Problem] = []
    root = Table(document, "", problems)
    base = source.parent if source.name != "<string>" else Path.cwd()
    dataflow = _dataflow(root.table("dataflow", required=True), base)
    kafka = _kafka(root.table("kafka"), base)
    inputs = tuple(read_input(t) for t in root.tables("inputs", required=True))
    outputs = tuple(read_output(t) for t in root.tables("outputs", required=True))
    epoch = _epoch(root.table("epoch"))
    dead_letter = root.table("dead_letter")
    dead_letter_topic = dead_letter.get("topic", str, "ddflow-dead-letters", check=check_topic)
    dead_letter.finish()
    checkpoint = _checkpoint(root.table("checkpoint"), base)
    metrics = _metrics(root.table("metrics"))
    worker = _worker(root.table("worker"))
    workers = _workers(root.table("workers"))
    root.finish()
    check_unique(problems, "inputs", [i.name for i in inputs], "name")
    check_unique(problems, "inputs", [i.topic for i in inputs], "topic")
    check_unique(problems, "outputs", [o.name for o in outputs], "name")
    check_unique(problems, "outputs", [o.topic for o in outputs], "topic")
    input_topics = {i.topic for i in inputs}
    output_topics = {o.topic for o in outputs}
    for n, o in enumerate(outputs):
        if o.topic in input_topics:
            problems.append(Problem(f"outputs[{n}].topic", f"{o.topic!r} is also an input topic"))
        if o.topic == dead_letter_topic:
            problems.append(Problem(f"outputs[{n}].topic", f"{o.topic!r} is also the dead-letter topic"))
        if o.progress_topic is not None and o.progress_topic != o.topic:  # (that one is reported already)
            clash = ("an input topic" if o.progress_topic in input_topics else "an output's data topic"
                     if o.progress_topic in output_topics else "the dead-letter topic"
                     if o.progress_topic == dead_letter_topic else None)
            if clash:
                problems.append(Problem(f"outputs[{n}].progress_topic", f"{o.progress_topic!r} is also {clash}"))
    if dead_letter_topic in input_topics:
        problems.append(Problem("dead_letter.topic", f"{dead_letter_topic!r} is also an input topic"))
    if problems:
        raise ConfigError(source, problems)
    return Config(
        source=source,
        dataflow=dataflow,
        kafka=kafka,
        inputs=inputs,
        outputs=outputs,
        epoch=epoch,
        dead_letter_topic=dead_letter_topic,
        checkpoint=checkpoint,
        metrics=metrics,
        worker=worker,
        workers=workers,
    )


# -- sections -----------------------------------------------------------------------------------


ON_ERROR = ("stop", "dead_letter")  # what a user function's exception does (dataflow.on_error)


def _dataflow(t: Table, base: Path) -> DataflowConfig:
    function = t.get("function", str, None, required=True, check=check_reference)
    args = t.get("args", dict, {})
    path = t.get("path", list, [], check=check_strings)
    on_error = t.get("on_error", str, "stop", check=check_choice(ON_ERROR))
    overrides = t.get("on_error_functions", dict, {})
    for name, chosen in overrides.items():
        problem = check_choice(ON_ERROR)(chosen) if isinstance(chosen, str) else f"must be a string, not {describe(chosen)}"
        if problem:
            t.problems.append(Problem(f"{t.key('on_error_functions')}.{name}", problem))
    t.finish()
    return DataflowConfig(function or "", dict(args), tuple((base / p).resolve() for p in path), on_error,
                          dict(overrides))


def _kafka(t: Table, base: Path) -> KafkaConfig:
    bootstrap = t.get("bootstrap", str, None, check=check_bootstrap)
    group_id = t.get("group_id", str, "ddflow", check=check_nonempty)
    transaction_timeout = t.duration("transaction_timeout", 60_000_000_000)
    if transaction_timeout < 10**9:
        t.problems.append(Problem(t.key("transaction_timeout"), "must be at least 1s"))
    commit_interval = t.duration("commit_interval", 50_000_000)
    connect_timeout = t.duration("connect_timeout", 120_000_000_000)
    if connect_timeout < 10**9:
        t.problems.append(Problem(t.key("connect_timeout"), "must be at least 1s"))
    if transaction_timeout >= 10**9 and commit_interval >= transaction_timeout:
        t.problems.append(Problem(t.key("commit_interval"), "must be shorter than kafka.transaction_timeout"))
    options_table = t.table("options")
    options: dict[str, Any] = {}
    for name in options_table.keys():
        key = options_table.key(name)
        value = options_table.get(name, (str, int, float, bool), None)
        if name == "bootstrap.servers":
            t.problems.append(Problem(key, "set the broker with kafka.bootstrap (or KAFKA_BOOTSTRAP / --bootstrap)"))
        elif name == "transaction.timeout.ms":
            t.problems.append(Problem(key, 'set it with kafka.transaction_timeout (e.g. "60s"): it also bounds '
                                      "how long the daemon waits for a transaction"))
        elif is_inline_refused(name):
            t.problems.append(
                Problem(key, "is a credential: do not write it in the file; reference it under "
                        f'[kafka.secrets] as "{name}" = {{ env = "VAR" }} or {{ file = "/path" }}')
            )
        elif value is not None:
            options[name] = value
    options_table.finish()
    secrets_table = t.table("secrets")
    secrets: dict[str, SecretRef] = {}
    for name in secrets_table.keys():
        ref = secrets_table.table(name)
        env = ref.get("env", str, None, check=check_nonempty)
        file = ref.get("file", str, None, check=check_nonempty)
        if (env is None) == (file is None) and not ref.failed:
            t.problems.append(Problem(ref.path, 'give exactly one of env = "VAR" or file = "/path"'))
        elif env is not None or file is not None:
            secrets[name] = SecretRef(name, env=env, file=None if file is None else (base / file).resolve())
        ref.finish()
    secrets_table.finish()
    t.finish()
    return KafkaConfig(bootstrap, group_id or "ddflow", options, secrets, transaction_timeout, commit_interval,
                       connect_timeout)


def _epoch(t: Table) -> EpochConfig:
    resolution = t.duration("resolution", None)
    max_records = t.get("max_records", int, None, check=check_positive)
    max_delay = t.duration("max_delay", None)
    max_updates = t.get("max_updates", int, 100_000, check=check_positive)
    t.finish()
    variable = max_records is not None or max_delay is not None
    if resolution is not None and variable:
        t.problems.append(Problem(t.key("resolution"),
                                  "give either a fixed resolution or max_records/max_delay, not both"))
    if resolution is None and not variable:
        resolution = 1_000_000
    if resolution is not None and resolution <= 0:
        t.problems.append(Problem(t.key("resolution"), "must be greater than 0"))
    if max_delay is not None and max_delay <= 0:
        t.problems.append(Problem(t.key("max_delay"), "must be greater than 0"))
    return EpochConfig(resolution, max_records, max_delay, max_updates)


def _checkpoint(t: Table, base: Path) -> CheckpointConfig:
    location = t.get("location", str, None, check=check_nonempty)
    interval = t.duration("interval", 60_000_000_000)
    keep = t.get("keep", int, 3, check=check_positive)
    shards = t.get("shards", int, 4, check=check_positive)
    t.finish()
    if interval <= 0:
        t.problems.append(Problem(t.key("interval"), "must be greater than 0"))
    return CheckpointConfig(None if location is None else (base / location).resolve(), interval, keep, shards)


def _metrics(t: Table) -> MetricsConfig:
    address = t.get("address", str, "127.0.0.1:9464")
    max_connections = t.get("max_connections", int, 16, check=check_positive)
    request_timeout = t.duration("request_timeout", 10_000_000_000)
    t.finish()
    if request_timeout <= 0:
        t.problems.append(Problem(t.key("request_timeout"), "must be greater than 0"))
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        t.problems.append(Problem(t.key("address"), str(exc)))
        return MetricsConfig()
    return MetricsConfig(host, port, max_connections, request_timeout)


def _worker(t: Table) -> WorkerConfig:
    stall = t.duration("stall_timeout", 300_000_000_000)
    stop = t.duration("stop_timeout", 75_000_000_000)
    frontier_stall = t.duration("frontier_stall_timeout", 30_000_000_000)
    t.finish()
    for key, value in (("stall_timeout", stall), ("stop_timeout", stop), ("frontier_stall_timeout", frontier_stall)):
        if value < 10**9:
            t.problems.append(Problem(t.key(key), "must be at least 1s"))
    return WorkerConfig(stall, stop, frontier_stall)


def _workers(t: Table) -> WorkersConfig:
    count = t.get("count", int, 1, check=check_positive)
    index = t.get("index", int, None)
    wait = t.duration("wait_timeout", 60_000_000_000)
    addresses = _mesh_addresses(t, t.get("addresses", (list, str), None), count)
    peer = t.duration("peer_timeout", 10_000_000_000)
    t.finish()
    if index is not None and not 0 <= index < count:
        t.problems.append(Problem(t.key("index"), f"{index} is not a worker of {count} (0 <= index < workers.count)"))
        index = None
    if wait < 10**9:
        t.problems.append(Problem(t.key("wait_timeout"), "must be at least 1s"))
    if peer < 10**8:
        t.problems.append(Problem(t.key("peer_timeout"), "must be at least 100ms"))
    return WorkersConfig(count, index, wait, addresses, peer)


def _mesh_addresses(t: Table, given: list | str | None, count: int) -> tuple[str, ...]:
    """``workers.addresses``: a list of ``count`` addresses, or one pattern whose ``{index}`` each
    worker's index fills (``tcp://ddflow-{index}.ddflow-mesh:7070``: a StatefulSet's stable names)."""
    if given is None:
        return ()
    if isinstance(given, str):
        if "{index}" not in given:
            t.problems.append(Problem(t.key("addresses"), f"{given!r}: a pattern names each worker by {{index}} "
                                      "(e.g. 'tcp://ddflow-{index}.ddflow-mesh:7070'), else give a list"))
            return ()
        given = [given.replace("{index}", str(i)) for i in range(count)]
    if len(given) != count:
        t.problems.append(Problem(t.key("addresses"), f"{len(given)} addresses for {count} workers (workers.count)"))
        return ()
    for a in given:
        host, sep, port = a[len("tcp://"):].rpartition(":") if isinstance(a, str) and a.startswith("tcp://") else ("", "", "")
        ipc = isinstance(a, str) and a.startswith("ipc://") and len(a) > len("ipc://")
        if not ipc and not (host and sep and port.isdigit() and 0 < int(port) <= 65535):
            t.problems.append(Problem(t.key("addresses"), f"{a!r} is neither tcp://HOST:PORT nor ipc://PATH"))
            return ()
    if len(set(given)) != count:
        t.problems.append(Problem(t.key("addresses"), "two workers have the same address"))
        return ()
    return tuple(given)
