"""The commands that work on topics from the shell: ``ddflow produce`` and ``ddflow tail``.

``produce`` reads updates from a file (JSON lines, or a msgpack stream: told apart by the first
byte, ``[``/``{`` starting JSON) and writes them to an input topic in the input's wire format
(``--format msgpack|json|debezium``; with ``--config`` and ``--input``, the input's topic, format,
fields and partitioner are the defaults). ``tail`` prints an output's view at its frontier and
then its changes (msgpack, json and debezium outputs), or, with ``--dead-letters``, each dead
letter of the dead-letter topic as the `deadletter` module decodes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from ...config import Config, load_config
from .usage import ENV, EXIT_OK, UsageError
from .signals import on_signals

__all__ = ["produce", "tail"]


def _where(args: argparse.Namespace) -> str:
    return "stdin" if args.file == "-" else str(args.file)


def _open(args: argparse.Namespace) -> tuple[IO[bytes], bool]:
    if args.file == "-":
        return sys.stdin.buffer, False
    try:
        return open(args.file, "rb"), True
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc


def _read_items(args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    """(position, decoded item) from FILE or stdin: "line N" of JSON lines, or "item N" of a msgpack
    stream (a stream whose first non-blank byte is ``[`` or ``{`` is JSON lines)."""
    stream, close = _open(args)
    try:
        first = stream.peek(256).lstrip()[:1]  # type: ignore[attr-defined]
        yield from (_json_lines if first in (b"[", b"{", b"") else _msgpack_items)(args, stream)
    finally:
        if close:
            stream.close()


def _json_lines(args: argparse.Namespace, stream: IO[bytes]) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{_where(args)} line {number}: not JSON ({exc})") from exc


def _msgpack_items(args: argparse.Namespace, stream: IO[bytes]) -> Iterator[tuple[str, Any]]:
    import msgpack

    unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False)
    number = 0
    try:
        for number, item in enumerate(unpacker, start=1):
            yield f"item {number}", item
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        raise UsageError(f"{_where(args)} item {number + 1}: not valid msgpack ({exc})") from exc


def _config(args: argparse.Namespace) -> Config | None:
    return None if args.config is None else load_config(args.config)


def _bootstrap(args: argparse.Namespace, config: Config | None) -> str:
    if args.bootstrap:
        return str(args.bootstrap)
    if config is not None:
        return config.kafka.bootstrap
    raise UsageError(f"give --bootstrap (or set {ENV['bootstrap']}, or --config with kafka.bootstrap)")


def _fields(text: str | None) -> list[str] | None:
    return None if text is None else [f.strip() for f in text.split(",") if f.strip()]


def produce(args: argparse.Namespace) -> int:
    """``ddflow produce``: send the updates of FILE to an input topic (see the module)."""
    from ...operators.lattice import T_MIN
    from ..exceptions import OptionsError, WireError
    from ..kafka.client import ensure_topics
    from ..kafka.producer import UpdateProducer

    config = _config(args)
    topic, fmt, fields, partitioner = args.topic, args.format, _fields(args.fields), "ddflow"
    if config is not None:
        if args.input is None:
            names = ", ".join(i.name for i in config.inputs)
            raise UsageError(f"--config needs --input NAME (one of {names})")
        try:
            spec = config.input(args.input)
        except KeyError:
            raise UsageError(f"--input {args.input!r}: {config.source} has no such input") from None
        topic = topic or spec.topic
        fmt = fmt or spec.format
        fields = fields or ([f.name for f in spec.fields] if spec.fields else None)
        partitioner = spec.partitioner
    if topic is None:
        raise UsageError("give --topic, or --config and --input")
    fmt = "msgpack" if fmt in (None, "jsonl") else fmt  # jsonl: the file's encoding in earlier versions
    if fmt == "debezium" and not fields:
        raise UsageError("--format debezium writes rows: give --fields A,B (or --config and --input)")
    options = {"bootstrap.servers": _bootstrap(args, config)}
    if args.partitions is not None:
        ensure_topics(options, {topic: args.partitions})
    last_time: int | None = None
    try:
        producer = UpdateProducer(topic, options, format=fmt, fields=fields if fmt != "msgpack" else None,
                                  partitioner=partitioner if fmt != "msgpack" else "ddflow")
    except OptionsError as exc:
        raise UsageError(str(exc)) from exc
    with producer:
        for position, item in _read_items(args):
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
                    data, t, diff = update
                    producer.send(data, t, diff)
                    last_time = t if last_time is None else max(last_time, t)
            except WireError as exc:
                raise UsageError(f"{_where(args)} {position}: {exc}") from exc
        if not args.no_progress and (args.progress is not None or last_time is not None):
            end = args.progress if args.progress is not None else max(last_time or 0, producer.frontier - 1) + 1
            producer.advance_to(end)
    frontier = "" if producer.frontier == T_MIN or fmt == "debezium" else f"; progress {producer.frontier}"
    print(f"sent {producer.sent_updates} updates in {producer.sent_messages} {fmt} messages to {topic}{frontier}",
          file=sys.stderr)
    return EXIT_OK


def tail(args: argparse.Namespace) -> int:
    """``ddflow tail``: an output's view and live changes, or the dead letters (see the module)."""
    config = _config(args)
    topic, fmt, progress_topic, fields = args.topic, args.format, args.progress_topic, _fields(args.fields)
    mode = "upsert" if args.upsert else "changelog"
    if config is not None and args.dead_letters:
        topic = topic or config.dead_letter_topic
    elif config is not None:
        if args.output is None:
            raise UsageError(f"--config needs --output NAME (one of {', '.join(o.name for o in config.outputs)}) "
                             "or --dead-letters")
        found = [o for o in config.outputs if o.name == args.output]
        if not found:
            raise UsageError(f"--output {args.output!r}: {config.source} has no such output")
        spec = found[0]
        mode = "upsert" if args.upsert else spec.mode
        topic, fmt = topic or spec.topic, fmt or spec.format
        progress_topic = progress_topic or spec.progress_topic
        fields = fields or ([f.name for f in spec.fields] if spec.fields else None)
    if topic is None:
        raise UsageError("give --topic, or --config with --output or --dead-letters")
    bootstrap = _bootstrap(args, config)
    if args.dead_letters:
        return _tail_dead_letters(args, topic, bootstrap)
    fmt = fmt or "msgpack"
    if fmt == "msgpack" and (progress_topic or fields):
        raise UsageError("--progress-topic and --fields are for --format json or debezium")
    if fmt != "msgpack" and not progress_topic:
        raise UsageError(f"--format {fmt} needs the output's --progress-topic")
    if mode == "upsert" and fmt != "json":
        raise UsageError("--upsert is for --format json outputs (mode = \"upsert\")")
    return _tail_output(args, topic, bootstrap, fmt, progress_topic, fields, mode)


def _tail_output(args: argparse.Namespace, topic: str, bootstrap: str, fmt: str, progress_topic: str | None,
                 fields: list[str] | None, mode: str = "changelog") -> int:
    from ..kafka.results import ResultClient

    stop = threading.Event()
    deadline = None if args.duration is None else time.monotonic() + args.duration
    emit = _print_json if args.json else _print_text
    with on_signals(stop.set), ResultClient(topic, {"bootstrap.servers": bootstrap}, format=fmt, mode=mode,
                                            progress_topic=progress_topic, fields=fields) as client:
        client.catch_up(timeout=60 if deadline is None else max(1.0, deadline - time.monotonic()))
        view = client.view
        emit({"frontier": client.frontier, "view": sorted(view.items(), key=_order)[: args.limit],
              "records": len(view)})
        while not stop.is_set() and not client.closed and (deadline is None or time.monotonic() < deadline):
            for change in client.poll(0.2):
                emit({"frontier": change.frontier, "updates": change.updates})
    return EXIT_OK


def _decode_dead_letter(message: Any) -> Any:
    """The dead letter of a message: its original value and key, the reasons from its headers."""
    from ..deadletter import decode_dead_letter

    return decode_dead_letter(message.value(), message.headers(), message.key())


def _tail_dead_letters(args: argparse.Namespace, topic: str, bootstrap: str) -> int:
    """Print every dead letter from the beginning of ``topic``, then new ones as they come."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    from ..exceptions import WireError
    from ..kafka.client import topic_partitions

    stop = threading.Event()
    deadline = None if args.duration is None else time.monotonic() + args.duration
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ddflow-tail-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
    partitions = topic_partitions({"bootstrap.servers": bootstrap}, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])  # from the start, no group join
    shown = 0
    try:
        with on_signals(stop.set):
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                if args.limit is not None and 0 < args.limit <= shown and deadline is None:
                    break
                for msg in consumer.consume(100, 0.2):
                    if msg.error() is not None:
                        continue
                    where = f"{msg.topic()}[{msg.partition()}] offset {msg.offset()}"
                    try:
                        letter = _decode_dead_letter(msg)
                    except WireError as exc:
                        print(f"{where}: {exc}", file=sys.stderr)
                        continue
                    _print_dead_letter(letter, args.json)
                    shown += 1
    finally:
        consumer.close()
    return EXIT_OK


def _print_dead_letter(letter: Any, as_json: bool) -> None:
    fields = dataclasses.asdict(letter)
    for name in ("raw", "key"):  # the original bytes: text when they are UTF-8, else hex
        data = fields.get(name)
        if isinstance(data, bytes):
            try:
                fields[name] = data.decode("utf-8")
            except UnicodeDecodeError:
                fields[name] = data.hex() if as_json else data
    if as_json:
        print(json.dumps(fields, default=repr), flush=True)
        return
    where = (f"{letter.topic}[{letter.partition}] offset {letter.offset} (input {letter.input!r})" if letter.topic
             else f"a record of {letter.input}")  # a user function's: no input message
    print(f"dead letter from {where}: {', '.join(letter.reasons)}: {letter.detail}", flush=True)
    cut = "" if letter.raw_size == len(letter.raw) else f" (first {len(letter.raw)} of {letter.raw_size} bytes)"
    print(f"  value{cut} {fields['raw']!r:.200}", flush=True)


def _order(item: tuple[Any, Any]) -> tuple[str, str]:
    return (type(item[0]).__name__, repr(item[0]))


def _print_json(event: dict[str, Any]) -> None:
    print(json.dumps(event, default=repr), flush=True)


def _print_text(event: dict[str, Any]) -> None:
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
