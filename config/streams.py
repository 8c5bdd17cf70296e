"""Reading the config's ``[[inputs]]`` and ``[[outputs]]`` tables: topics, formats and fields.

Each table becomes an `InputConfig` or `OutputConfig`; a problem is recorded with its key on the
`table.Table` (the loader reports them all at once). ``fields`` declares a record's fields in
order, as a table ``{ name = "type" }`` or an array of names (each ``any``).
"""

from __future__ import annotations

from .errors import Problem
from .schema import (
    DEBEZIUM_TIMES,
    FIELD_TYPES,
    FORMATS,
    LATE_POLICIES,
    OUTPUT_MODES,
    PARTITIONERS,
    PROGRESS_POLICIES,
    Field,
    InputConfig,
    OutputConfig,
)
from .table import Table, check_choice, check_name, check_positive, check_topic

__all__ = ["read_fields", "read_input", "read_output"]


def read_input(t: Table) -> InputConfig:
    name = t.get("name", str, "", required=True, check=check_name)
    topic = t.get("topic", str, "", required=True, check=check_topic)
    fields = read_fields(t)
    progress = t.get("progress", str, "explicit", check=check_choice(PROGRESS_POLICIES))
    late = t.get("late", str, "advance", check=check_choice(LATE_POLICIES))
    idle = t.duration("idle_timeout", None)
    max_bytes = t.get("max_message_bytes", int, 1 << 20, check=check_positive)
    fmt = t.get("format", str, "msgpack", check=check_choice(FORMATS))
    debezium_time = t.get("debezium_time", str, None, check=check_choice(DEBEZIUM_TIMES))
    partitioner = t.get("partitioner", str, "ddflow", check=check_choice(PARTITIONERS))
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


def read_fields(t: Table, *, required: bool = True) -> tuple[Field, ...]:
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
        if not isinstance(fname, str) or check_name(fname) is not None:
            t.problems.append(Problem(where, f"{fname!r} is not a field name (letters, digits, '_')"))
        elif not isinstance(ftype, str) or ftype not in FIELD_TYPES:
            t.problems.append(Problem(where, f"type {ftype!r} is not one of {', '.join(FIELD_TYPES)}"))
        else:
            fields.append(Field(fname, ftype))
    names = [f.name for f in fields]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        t.problems.append(Problem(key, f"field {dup!r} appears twice"))
    return tuple(fields)


def read_output(t: Table) -> OutputConfig:
    name = t.get("name", str, "", required=True, check=check_name)
    topic = t.get("topic", str, "", required=True, check=check_topic)
    fmt = t.get("format", str, "msgpack", check=check_choice(FORMATS))
    fields = read_fields(t, required=fmt == "debezium")
    raw_key = t.get("key", (str, list), None)
    progress_topic = t.get("progress_topic", str, None, check=check_topic)
    schemas = t.get("schemas", bool, False)
    partitioner = t.get("partitioner", str, "ddflow", check=check_choice(PARTITIONERS))
    mode = t.get("mode", str, "changelog", check=check_choice(OUTPUT_MODES))
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
