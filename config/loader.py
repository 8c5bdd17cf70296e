"""Load a TOML config file into ``Config``, collecting every problem with its key.

The loader walks the document section by section with a ``_Table`` reader that knows its dotted
path, records which keys it consumed, and reports unknown keys (with a close match, so typos are
obvious). Nothing stops at the first problem: the whole file is checked and one ``ConfigError``
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

import difflib
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError, Problem
from .schema import (
    DEBEZIUM_TIMES,
    FIELD_TYPES,
    FORMATS,
    LATE_POLICIES,
    OUTPUT_MODES,
    PARTITIONERS,
    PROGRESS_POLICIES,
    CheckpointConfig,
    Config,
    DataflowConfig,
    EpochConfig,
    Field,
    InputConfig,
    KafkaConfig,
    MetricsConfig,
    OutputConfig,
    WorkerConfig,
    WorkersConfig,
)
from .secrets import SecretRef, is_inline_refused

__all__ = ["load_config", "parse_config", "parse_duration"]

T = TypeVar("T")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def parse_duration(text: str) -> int:
    """``"1ms"`` -> 1_000_000 (nanoseconds). Raises ``ValueError`` with the accepted forms."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a duration (write a number and a unit: '500us', '1ms', '2s', '1m')")
    value = float(match.group(1)) * _UNIT_NS[match.group(2)]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of nanoseconds")
    return int(value)


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
    root = _Table(document, "", problems)
    base = source.parent if source.name != "<string>" else Path.cwd()
    dataflow = _dataflow(root.table("dataflow", required=True), base)
    kafka = _kafka(root.table("kafka"), base)
    inputs = tuple(_input(t) for t in root.tables("inputs", required=True))
    outputs = tuple(_output(t) for t in root.tables("outputs", required=True))
    epoch = _epoch(root.table("epoch"))
    dead_letter = root.table("dead_letter")
    dead_letter_topic = dead_letter.get("topic", str, "ddflow-dead-letters", check=_topic)
    dead_letter.finish()
    checkpoint = _checkpoint(root.table("checkpoint"), base)
    metrics = _metrics(root.table("metrics"))
    worker = _worker(root.table("worker"))
    workers = _workers(root.table("workers"))
    root.finish()
    _unique(problems, "inputs", [i.name for i in inputs], "name")
    _unique(problems, "inputs", [i.topic for i in inputs], "topic")
    _unique(problems, "outputs", [o.name for o in outputs], "name")
    _unique(problems, "outputs", [o.topic for o in outputs], "topic")
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
    if workers.addresses and checkpoint.location is not None:
        problems.append(Problem("workers.addresses", "mesh workers take no checkpoints yet (a restart replays the "
                                "inputs): remove checkpoint.location, or workers.addresses for the exchange topics"))
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


def _dataflow(t: _Table, base: Path) -> DataflowConfig:
    function = t.get("function", str, None, required=True, check=_reference)
    args = t.get("args", dict, {})
    path = t.get("path", list, [], check=_strings)
    on_error = t.get("on_error", str, "stop", check=_choice(ON_ERROR))
    overrides = t.get("on_error_functions", dict, {})
    for name, chosen in overrides.items():
        problem = _choice(ON_ERROR)(chosen) if isinstance(chosen, str) else f"must be a string, not {_describe(chosen)}"
        if problem:
            t.problems.append(Problem(f"{t.key('on_error_functions')}.{name}", problem))
    t.finish()
    return DataflowConfig(function or "", dict(args), tuple((base / p).resolve() for p in path), on_error,
                          dict(overrides))


def _kafka(t: _Table, base: Path) -> KafkaConfig:
    bootstrap = t.get("bootstrap", str, None, check=_bootstrap)
    group_id = t.get("group_id", str, "ddflow", check=_nonempty)
    transaction_timeout = t.duration("transaction_timeout", 60_000_000_000)
    if transaction_timeout < 10**9:
        t.problems.append(Problem(t.key("transaction_timeout"), "must be at least 1s"))
    commit_interval = t.duration("commit_interval", 50_000_000)
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
        env = ref.get("env", str, None, check=_nonempty)
        file = ref.get("file", str, None, check=_nonempty)
        if (env is None) == (file is None) and not ref.failed:
            t.problems.append(Problem(ref.path, 'give exactly one of env = "VAR" or file = "/path"'))
        elif env is not None or file is not None:
            secrets[name] = SecretRef(name, env=env, file=None if file is None else (base / file).resolve())
        ref.finish()
    secrets_table.finish()
    t.finish()
    return KafkaConfig(bootstrap, group_id or "ddflow", options, secrets, transaction_timeout, commit_interval)


def _input(t: _Table) -> InputConfig:
    name = t.get("name", str, "", required=True, check=_name)
    topic = t.get("topic", str, "", required=True, check=_topic)
    fields = _fields(t)
    progress = t.get("progress", str, "explicit", check=_choice(PROGRESS_POLICIES))
    late = t.get("late", str, "advance", check=_choice(LATE_POLICIES))
    idle = t.duration("idle_timeout", None)
    max_bytes = t.get("max_message_bytes", int, 1 << 20, check=_positive)
    fmt = t.get("format", str, "msgpack", check=_choice(FORMATS))
    debezium_time = t.get("debezium_time", str, None, check=_choice(DEBEZIUM_TIMES))
    partitioner = t.get("partitioner", str, "ddflow", check=_choice(PARTITIONERS))
    t.finish()
    if "partitioner" in t.data and fmt == "msgpack":
        t.problems.append(Problem(t.key("partitioner"), "only json and debezium inputs use it (format is 'msgpack': "
                                  "batches of updates, no message key per record)"))
    if fmt == "debezium" and progress == "explicit":
        t.problems.append(Problem(t.key("progress"), "a debezium input carries no progress markers: set progress = "
                                  "'monotonic' (event times non-decreasing per partition) or 'reclock' (arrival times)"))
    if debezium_time is not None and fmt != "debezium":
        t.problems.append(Problem(t.key("debezium_time"), f"only debezium inputs use it (format is {fmt!r})"))
    if fmt == "json":
        for clash in sorted({"time", "diff"} & {f.name for f in fields}):
            t.problems.append(Problem(t.key("fields"), f"field {clash!r}: in the json format 'time' and 'diff' are "
                                      "the update's own keys; rename the field"))
    if idle is not None and progress != "monotonic":
        t.problems.append(Problem(t.key("idle_timeout"),
                                  f"only the 'monotonic' progress policy uses it (progress is {progress!r})"))
    if idle is not None and idle <= 0:
        t.problems.append(Problem(t.key("idle_timeout"), "must be greater than 0"))
    return InputConfig(name, topic, fields, progress, late, idle, max_bytes, fmt, debezium_time or "envelope",
                       partitioner)


def _fields(t: _Table, *, required: bool = True) -> tuple[Field, ...]:
    key = t.key("fields")
    raw = t.get("fields", (list, dict), None, required=required)
    if raw is None:
        return ()
    if isinstance(raw, list):
        pairs = [(n, "any") for n in raw]
    else:
        pairs = list(raw.items())
    if not pairs:
        t.problems.append(Problem(key, "needs at least one field"))
    fields = []
    for n, (fname, ftype) in enumerate(pairs):
        where = f"{key}[{n}]" if isinstance(raw, list) else f"{key}.{fname}"
        if not isinstance(fname, str) or not _NAME.match(fname):
            t.problems.append(Problem(where, f"{fname!r} is not a field name (letters, digits, '_')"))
        elif not isinstance(ftype, str) or ftype not in FIELD_TYPES:
            t.problems.append(Problem(where, f"type {ftype!r} is not one of {', '.join(FIELD_TYPES)}"))
        else:
            fields.append(Field(fname, ftype))
    names = [f.name for f in fields]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        t.problems.append(Problem(key, f"field {dup!r} appears twice"))
    return tuple(fields)


def _output(t: _Table) -> OutputConfig:
    name = t.get("name", str, "", required=True, check=_name)
    topic = t.get("topic", str, "", required=True, check=_topic)
    fmt = t.get("format", str, "msgpack", check=_choice(FORMATS))
    fields = _fields(t, required=fmt == "debezium")
    raw_key = t.get("key", (str, list), None)
    progress_topic = t.get("progress_topic", str, None, check=_topic)
    schemas = t.get("schemas", bool, False)
    partitioner = t.get("partitioner", str, "ddflow", check=_choice(PARTITIONERS))
    mode = t.get("mode", str, "changelog", check=_choice(OUTPUT_MODES))
    tombstones = t.get("tombstones", bool, True)
    t.finish()
    only = {"mode": "json", "tombstones": "debezium"}
    for option, owner in only.items():
        if option in t.data and fmt != owner:
            t.problems.append(Problem(t.key(option), f"only {owner} outputs use it (format is {fmt!r})"))
    if fmt == "msgpack":
        for option, given in (("fields", "fields" in t.data), ("key", raw_key is not None),
                              ("progress_topic", progress_topic is not None), ("schemas", "schemas" in t.data),
                              ("partitioner", "partitioner" in t.data)):
            if given:
                t.problems.append(Problem(t.key(option), "only json and debezium outputs use it (format is 'msgpack': "
                                          "batches of updates, no message key per record)"
                                          if option == "partitioner" else
                                          "only json and debezium outputs use it (format is 'msgpack')"))
        return OutputConfig(name, topic)
    if mode == "upsert" and not fields:
        t.problems.append(Problem(t.key("mode"), "an upsert output needs the record's fields (fields)"))
    if progress_topic is None and "progress_topic" not in t.data:
        t.problems.append(Problem(t.key("progress_topic"), f"is required: a {fmt} output's data topic holds only "
                                  "change events, its progress markers go to this companion topic"))
    elif progress_topic == topic:
        t.problems.append(Problem(t.key("progress_topic"), f"{topic!r} is the output's own topic; name another"))
    names = [f.name for f in fields]
    key: list[str] = [raw_key] if isinstance(raw_key, str) else list(raw_key or names[:1])
    if raw_key is not None and not fields:
        t.problems.append(Problem(t.key("key"), "name the record's fields first (fields)"))
    elif any(not isinstance(k, str) or k not in names for k in key) or len(set(key)) != len(key):
        t.problems.append(Problem(t.key("key"), f"{raw_key!r} must name distinct fields of {names}"))
    if schemas:
        untyped = [f.name for f in fields if f.type == "any"]
        if not fields or untyped:
            t.problems.append(Problem(t.key("schemas"), "Kafka Connect schemas need a type for every field "
                                      f"(int, float, str, bytes, bool){': ' + ', '.join(untyped) if untyped else ''}"))
    if fmt == "json":
        for clash in sorted({"time", "diff"} & set(names)):
            t.problems.append(Problem(t.key("fields"), f"field {clash!r}: in the json format 'time' and 'diff' are "
                                      "the update's own keys; rename the field"))
    return OutputConfig(name, topic, fmt, fields, tuple(k for k in key if isinstance(k, str)), progress_topic, schemas,
                        partitioner, mode, tombstones)


def _epoch(t: _Table) -> EpochConfig:
    resolution = t.duration("resolution", None)
    max_records = t.get("max_records", int, None, check=_positive)
    max_delay = t.duration("max_delay", None)
    max_updates = t.get("max_updates", int, 100_000, check=_positive)
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


def _checkpoint(t: _Table, base: Path) -> CheckpointConfig:
    location = t.get("location", str, None, check=_nonempty)
    interval = t.duration("interval", 60_000_000_000)
    keep = t.get("keep", int, 3, check=_positive)
    shards = t.get("shards", int, 4, check=_positive)
    t.finish()
    if interval <= 0:
        t.problems.append(Problem(t.key("interval"), "must be greater than 0"))
    return CheckpointConfig(None if location is None else (base / location).resolve(), interval, keep, shards)


def _metrics(t: _Table) -> MetricsConfig:
    address = t.get("address", str, "127.0.0.1:9464")
    max_connections = t.get("max_connections", int, 16, check=_positive)
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


def _worker(t: _Table) -> WorkerConfig:
    stall = t.duration("stall_timeout", 300_000_000_000)
    stop = t.duration("stop_timeout", 75_000_000_000)
    t.finish()
    for key, value in (("stall_timeout", stall), ("stop_timeout", stop)):
        if value < 10**9:
            t.problems.append(Problem(t.key(key), "must be at least 1s"))
    return WorkerConfig(stall, stop)


def _workers(t: _Table) -> WorkersConfig:
    count = t.get("count", int, 1, check=_positive)
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


def _mesh_addresses(t: _Table, given: list | str | None, count: int) -> tuple[str, ...]:
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


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (``[v6]:port`` too) -> (host, port); port 0 means any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port (e.g. '127.0.0.1:9464', '0.0.0.0:9464')")
    return host.strip("[]"), int(port)


# -- value checks: return an error message or None ------------------------------------------------


def _reference(value: str) -> str | None:
    if not _REFERENCE.match(value):
        return f"{value!r} is not a 'module:function' reference (e.g. 'mypkg.flows:build')"
    return None


def _bootstrap(value: str) -> str | None:
    for server in value.split(","):
        try:
            parse_address(server.strip())
        except ValueError:
            return f"{value!r} is not a comma-separated list of host:port"
    return None


def _name(value: str) -> str | None:
    return None if _NAME.match(value) else f"{value!r} is not a name (letters, digits, '_', '.', '-')"


def _topic(value: str) -> str | None:
    return None if _TOPIC.match(value) else f"{value!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)"


def _nonempty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _positive(value: int) -> str | None:
    return None if value > 0 else f"{value} must be greater than 0"


def _strings(value: list[Any]) -> str | None:
    return None if all(isinstance(v, str) for v in value) else "must be a list of strings"


def _choice(options: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value in options:
            return None
        return f"{value!r} is not one of {', '.join(repr(o) for o in options)}"

    return check


def _unique(problems: list[Problem], section: str, values: list[str], key: str) -> None:
    seen: dict[str, int] = {}
    for n, v in enumerate(values):
        if v in seen and v:
            problems.append(Problem(f"{section}[{n}].{key}", f"{v!r} is already used by {section}[{seen[v]}]"))
        seen.setdefault(v, n)


# -- the reader -----------------------------------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false",
               list: "an array", dict: "a table"}


class _Table:
    """A TOML table with its dotted path: typed getters that record problems instead of raising."""

    def __init__(self, data: Any, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        self.failed = False
        self._seen: set[str] = set()
        if not isinstance(data, dict):
            self._fail(path, f"must be a table, not {_describe(data, show=False)}")
            data = {}
        self.data: dict[str, Any] = data

    def key(self, name: str) -> str:
        """Dotted TOML path; names that are not bare keys are quoted (``kafka.options."sasl.password"``)."""
        if not re.match(r"^[A-Za-z0-9_-]+$", name):
            name = f'"{name}"'
        return f"{self.path}.{name}" if self.path else name

    def keys(self) -> list[str]:
        return list(self.data)

    def _fail(self, key: str, message: str) -> None:
        self.failed = True
        self.problems.append(Problem(key, message))

    def get(self, name: str, kind: type | tuple[type, ...], default: T, *, required: bool = False,
            check: Callable[[Any], str | None] | None = None) -> Any:
        self._seen.add(name)
        if name not in self.data:
            if required:
                self._fail(self.key(name), "is required")
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int subclass in Python; TOML keeps them apart, and so do we
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self._fail(self.key(name), f"must be {wanted}, not {_describe(value)}")
            return default
        if check is not None and (message := check(value)) is not None:
            self._fail(self.key(name), message)
            return default
        return value

    def duration(self, name: str, default: T) -> int | T:
        text = self.get(name, str, None)
        if text is None:
            return default
        try:
            return parse_duration(text)
        except ValueError as exc:
            self._fail(self.key(name), str(exc))
            return default

    def table(self, name: str, *, required: bool = False) -> _Table:
        self._seen.add(name)
        if name not in self.data:
            if required:
                self._fail(self.key(name), "is required (a table)")
            return _Table({}, self.key(name), self.problems)
        return _Table(self.data[name], self.key(name), self.problems)

    def tables(self, name: str, *, required: bool = False) -> list[_Table]:
        self._seen.add(name)
        key = self.key(name)
        value = self.data.get(name)
        if value is None:
            if required:
                self._fail(key, f"is required: add at least one [[{key}]] table")
            return []
        if not isinstance(value, list) or not value:
            self._fail(key, f"must be one or more [[{key}]] tables, not {_describe(value)}")
            return []
        return [_Table(item, f"{key}[{n}]", self.problems) for n, item in enumerate(value)]

    def finish(self) -> None:
        """Report every key that no getter consumed, suggesting the closest known key."""
        known = sorted(self._seen)
        for name in self.data:
            if name not in self._seen:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(known)})"
                self.problems.append(Problem(self.key(name), "unknown key" + hint))


def _describe(value: Any, *, show: bool = True) -> str:
    """``a string ('x')``; ``show=False`` where the value could be a misplaced secret."""
    for kind, name in _TYPE_NAMES.items():
        if type(value) is kind:
            return f"{name} ({value!r})" if show and kind in (str, int, float, bool) else name
    return type(value).__name__
