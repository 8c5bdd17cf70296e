"""The wire formats, pure: every malformed-input class of each input format is reported with its
reason (and, in a batch, its position) while the good updates of the same message are kept;
output encoders give change events that read back to exactly the updates they encode."""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from typing import Any

import msgpack
import pytest

from ddflow.daemon.exceptions import OptionsError, WireError
from ddflow.daemon.formats import decoder, encoder, reader
from ddflow.daemon.formats.epochs import read_epoch_header, read_marker
from ddflow.daemon.formats.types import REASONS
from ddflow.daemon.formats.schema import InputFormat

FIELDS = InputFormat({"user": "int", "page": "str"}, max_message_bytes=400)
T = 1_700_000_000_000_000_000


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def single_error(decoded: Any) -> tuple[str, str]:
    assert decoded.updates == [] and decoded.progress is None and not decoded.tombstone
    assert decoded.malformed is not None and len(decoded.malformed) == 1
    bad = decoded.malformed[0]
    assert bad.reason in REASONS and bad.index is None
    return bad.reason, bad.detail


# -- json input -----------------------------------------------------------------------------------

JSON = decoder("json", FIELDS)


def test_json_updates_in_both_forms_batches_and_markers() -> None:
    assert JSON.decode(js([[7, "home"], T, 1])).updates == [((7, "home"), T, 1)]
    row = {"user": 7, "page": "home", "time": T, "diff": -2, "referrer": "ignored"}
    assert JSON.decode(js(row)).updates == [((7, "home"), T, -2)]
    batch = JSON.decode(js([[[1, "a"], T, 1], {"user": 2, "page": "b", "time": T + 1, "diff": 1}, [[3, "c"], T, 1]]))
    assert batch.updates == [((1, "a"), T, 1), ((2, "b"), T + 1, 1), ((3, "c"), T, 1)] and batch.malformed is None
    marker = JSON.decode(js({"progress": T}))
    assert marker.progress == T and marker.updates == [] and marker.malformed is None
    floats = decoder("json", InputFormat({"sensor": "str", "reading": "float"}))
    assert floats.decode(js([["s1", 20], T, 1])).updates == [(("s1", 20.0), T, 1)]
    nested = decoder("json", InputFormat(["edge"]))
    assert nested.decode(js([[[1, 2]], T, 1])).updates == [(((1, 2),), T, 1)]  # arrays become tuples


@pytest.mark.parametrize(("value", "reason", "fragment"), [
    (None, "empty", "null"),
    (b"", "empty", "empty"),
    (b"x" * 401, "oversized", "401 bytes > max_message_bytes 400"),
    (b"{not json", "bad_json", "JSONDecodeError"),
    (b"\xff\xfe\x00", "bad_json", ""),
    (b'[[1, "a"], NaN, 1]', "time_type", "time nan is a float"),
    (b'{"user": 1, "user": 2, "page": "a", "time": 1, "diff": 1}', "bad_json", "the key 'user' appears twice"),
    (b'[[1, "a", [2, Infinity]], 1, 1]', "arity", "3 fields"),
    (b'[[1, "a"], 1, 1] [2]', "bad_json", "Extra data"),
    (b'"a string"', "shape", "a JSON string"),
    (b"42", "shape", "a JSON number"),
    (js({"progress": "soon"}), "bad_progress", "'soon'"),
    (js({"progress": 2**63}), "bad_progress", "not an int64"),
    (js({"page": "a", "time": T, "diff": 1}), "missing_field", "no field 'user'"),
    (js({"user": 1, "page": "a", "diff": 1}), "missing_field", "no 'time'"),
    (js({"user": 1, "page": "a", "time": T}), "missing_field", "no 'diff'"),
    (js([[1, "a", 3], T, 1]), "arity", "3 fields, expected 2"),
    (js([["1", "a"], T, 1]), "field_type", "field 'user' = '1' is a str, expected int"),
    (js([[1.5, "a"], T, 1]), "field_type", "expected int"),
    (js([[True, "a"], T, 1]), "field_type", "is a bool, expected int"),
    (js([{"user": 1}, T, 1]), "field_type", "not an array"),
    (js([[1, "a"], "now", 1]), "time_type", "'now' is a str"),
    (js([[1, "a"], 1.7e18, 1]), "time_type", "is a float"),
    (js([[1, "a"], 2**63, 1]), "time_range", "outside int64"),
    (js([[1, "a"], T, "1"]), "diff_type", "is a str"),
    (js([[1, "a"], T, 1.0]), "diff_type", "is a float"),
    (js([[1, "a"], T, 0]), "zero_diff", "diff is 0"),
    (js([[1, "a"], T, -(2**64)]), "diff_range", "outside int64"),
])
def test_json_each_malformed_class_has_its_reason(value: bytes | None, reason: str, fragment: str) -> None:
    got, detail = single_error(JSON.decode(value))
    assert got == reason and fragment in detail


def test_json_batch_keeps_the_good_updates_and_names_the_bad_positions() -> None:
    items = [
        [[1, "a"], T, 1],                             # 0 good
        {"user": 2, "page": "b", "time": T},          # 1 missing diff
        [[3, "c"], T, 0],                             # 2 zero diff
        {"user": 4, "page": "d", "time": T, "diff": 1},  # 3 good
        "junk",                                       # 4 arity
        [["5", "e"], T, 1],                           # 5 field type
        [[6, "f"], T + 5, -1],                        # 6 good
    ]
    decoded = JSON.decode(js(items))
    assert decoded.updates == [((1, "a"), T, 1), ((4, "d"), T, 1), ((6, "f"), T + 5, -1)]
    assert [decoded.index(i) for i in range(3)] == [0, 3, 6]
    assert [(b.reason, b.index) for b in decoded.malformed] == [
        ("missing_field", 1), ("zero_diff", 2), ("arity", 4), ("field_type", 5)]


def test_json_bytes_fields_are_base64_and_reclocked_inputs_need_no_time() -> None:
    blobs = decoder("json", InputFormat({"id": "int", "blob": "bytes"}))
    encoded = base64.b64encode(b"\x00\xffraw").decode()
    assert blobs.decode(js([[1, encoded], T, 1])).updates == [((1, b"\x00\xffraw"), T, 1)]
    assert blobs.decode(js({"id": 1, "blob": encoded, "time": T, "diff": 1})).updates == [((1, b"\x00\xffraw"), T, 1)]
    reason, detail = single_error(blobs.decode(js([[1, "not base64!"], T, 1])))
    assert reason == "field_type" and "not base64" in detail
    reclocked = decoder("json", InputFormat(["user", "page"], time_required=False))
    assert reclocked.decode(js({"user": 1, "page": "a", "diff": 1})).updates == [((1, "a"), None, 1)]


# -- debezium input -------------------------------------------------------------------------------

DEBEZIUM = decoder("debezium", FIELDS)


def event(op: str, before: Any = None, after: Any = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000}
    out.update(extra)
    return out


MS = 1_700_000_000_000 * 1_000_000


def test_debezium_ops_become_retractions_and_insertions() -> None:
    row, new = {"user": 1, "page": "a", "email": "x@y"}, {"user": 1, "page": "b"}
    assert DEBEZIUM.decode(js(event("c", after=row))).updates == [((1, "a"), MS, 1)]
    assert DEBEZIUM.decode(js(event("r", after=row))).updates == [((1, "a"), MS, 1)]
    assert DEBEZIUM.decode(js(event("d", before=row))).updates == [((1, "a"), MS, -1)]
    assert DEBEZIUM.decode(js(event("u", before=row, after=new))).updates == [((1, "a"), MS, -1), ((1, "b"), MS, 1)]
    wrapped = {"schema": {"type": "struct", "fields": []}, "payload": event("c", after=row)}
    assert DEBEZIUM.decode(js(wrapped)).updates == [((1, "a"), MS, 1)]


def test_debezium_time_prefers_ns_then_us_then_ms_of_the_chosen_block() -> None:
    after = {"user": 1, "page": "a"}
    assert DEBEZIUM.decode(js(event("c", after=after, ts_us=5, ts_ns=7))).updates[0][1] == 7
    assert DEBEZIUM.decode(js(event("c", after=after, ts_us=5))).updates[0][1] == 5_000
    source = decoder("debezium", FIELDS, time_source="source")
    body = event("c", after=after, source={"ts_ms": 3, "ts_us": 3_000_002})
    assert source.decode(js(body)).updates[0][1] == 3_000_002_000
    assert DEBEZIUM.decode(js(body)).updates[0][1] == MS  # the envelope's ts_ms
    reclocked = decoder("debezium", InputFormat(["user", "page"], time_required=False), time_required=False)
    assert reclocked.decode(js({"op": "c", "after": after})).updates == [((1, "a"), None, 1)]


def test_debezium_tombstones_are_skipped_not_errors() -> None:
    for value in (None, b"null", js({"schema": None, "payload": None})):
        decoded = DEBEZIUM.decode(value)
        assert decoded.tombstone and decoded.updates == [] and decoded.malformed is None


@pytest.mark.parametrize(("value", "reason", "fragment"), [
    (b"", "empty", "empty"),
    (b"{" * 300, "bad_json", ""),
    (b"x" * 401, "oversized", "max_message_bytes 400"),
    (js([1, 2]), "shape", "expected a change event object"),
    (js({"before": None, "after": {"user": 1, "page": "a"}, "ts_ms": 1}), "bad_event", "no 'op'"),
    (js(event("t")), "bad_event", "op 't'"),
    (js(event("m")), "bad_event", "op 'm'"),
    (js(event("c")), "bad_event", "op 'c' needs an 'after' row"),
    (js(event("c", after=[1, "a"])), "bad_event", "the event has a JSON list"),
    (js(event("d")), "bad_event", "REPLICA IDENTITY FULL"),
    (js(event("u", after={"user": 1, "page": "b"})), "bad_event", "op 'u' without a 'before' row"),
    (js({"op": "c", "after": {"user": 1, "page": "a"}}), "bad_event", "no ts_ns, ts_us or ts_ms in the envelope"),
    (js(event("c", after={"user": 1, "page": "a"}, ts_ms="now")), "time_type", "ts_ms 'now'"),
    (js(event("c", after={"user": 1, "page": "a"}, ts_ms=2**62)), "time_range", "outside int64"),
    (js(event("c", after={"user": 1})), "missing_field", "the 'after' row has no field 'page'"),
    (js(event("u", before={"user": 1, "page": 5}, after={"user": 1, "page": "b"})), "field_type",
     "the 'before' row: field 'page' = 5"),
])
def test_debezium_each_malformed_class_is_dead_lettered_whole(value: bytes, reason: str, fragment: str) -> None:
    got, detail = single_error(DEBEZIUM.decode(value))
    assert got == reason and fragment in detail, detail


def test_debezium_source_time_needs_a_source_block() -> None:
    source = decoder("debezium", FIELDS, time_source="source")
    reason, detail = single_error(source.decode(js(event("c", after={"user": 1, "page": "a"}))))
    assert reason == "bad_event" and "no 'source' block" in detail
    with pytest.raises(OptionsError, match="'commit' is not one of envelope, source"):
        decoder("debezium", FIELDS, time_source="commit")


def test_msgpack_decoder_is_the_wire_format() -> None:
    mp = decoder("msgpack", FIELDS)
    assert mp.decode(msgpack.packb([[1, "a"], T, 1])).updates == [((1, "a"), T, 1)]
    assert single_error(mp.decode(b"\xc1"))[0] == "bad_msgpack"


# -- outputs --------------------------------------------------------------------------------------


def consolidate(updates: list[tuple[Any, int, int]]) -> Counter[tuple[Any, int]]:
    out: Counter[tuple[Any, int]] = Counter()
    for record, time, diff in updates:
        out[(record, time)] += diff
    return +out + -(-out)  # drop zeros, keep negatives


def random_updates(seed: int) -> list[tuple[Any, int, int]]:
    rng = random.Random(seed)
    return [((rng.choice("abcd"), rng.randint(0, 3)), rng.randint(0, 5), rng.choice([-2, -1, 1, 1, 3]))
            for _ in range(60)]


@pytest.mark.parametrize("fmt", ["json", "debezium"])
@pytest.mark.parametrize("schemas", [False, True])
def test_change_events_read_back_to_the_updates(fmt: str, schemas: bool) -> None:
    fields = {"page": "str", "views": "int"}
    enc = encoder(fmt, "counts", "counts-topic", fields=fields, progress_topic="counts-progress", schemas=schemas)
    back = reader(fmt, fields)
    for seed in range(5):
        updates = random_updates(seed)
        partitions = 3
        by_partition: list[list[Any]] = [[] for _ in range(partitions)]
        for u in updates:
            by_partition[enc.partition(u[0], partitions)].append(u)
        decoded = []
        for p, entries in enumerate(by_partition):
            data, marker = enc.epoch(0, 10, "inc", p, entries)
            m = read_marker(marker[3])
            assert (marker[0], m.topic, m.partition, m.count) == ("counts-progress", "counts-topic", p, len(data))
            times, tombs = [], []
            for topic, partition, key, value, headers in data:
                assert (topic, partition) == ("counts-topic", p) and read_epoch_header(headers) == ("inc", 0, 10)
                got = back.updates(value)
                if value is None:  # the tombstone after a debezium delete event
                    assert fmt == "debezium" and got == [] and key == data[len(times) + len(tombs) - 1][2]
                    tombs.append(key)
                    continue
                assert all(enc.partition(r, partitions) == p for r, _, _ in got)  # one key, one partition
                assert json.loads(key) == ({"page": got[0][0][0]} if not schemas else
                                           {"schema": json.loads(key)["schema"], "payload": {"page": got[0][0][0]}})
                times.append(got[0][1])
                decoded += got
            assert times == sorted(times)  # in time order per partition
        assert consolidate(decoded) == consolidate(updates)


def test_debezium_output_pairs_a_retraction_and_an_insertion_of_one_key_into_an_update() -> None:
    enc = encoder("debezium", "counts", "t", fields=["page", "views"], progress_topic="tp")
    data, _ = enc.epoch(0, 100, "inc", 0, [(("home", 3), 50, -1), (("home", 4), 50, 1), (("about", 1), 50, 1),
                                           (("blog", 2), 40, -1), (("home", 4), 60, -1)])
    assert [m[3] for m in data].count(None) == 2  # a tombstone after each delete
    assert all(data[i - 1][3] is not None and json.loads(data[i - 1][3])["op"] == "d" and data[i - 1][2] == m[2]
               for i, m in enumerate(data) if m[3] is None)
    data = [m for m in data if m[3] is not None]
    events = [json.loads(m[3]) for m in data]
    assert [(e["op"], e["before"], e["after"], e["ts_ns"]) for e in events] == [
        ("d", {"page": "blog", "views": 2}, None, 40),
        ("c", None, {"page": "about", "views": 1}, 50),
        ("u", {"page": "home", "views": 3}, {"page": "home", "views": 4}, 50),
        ("d", {"page": "home", "views": 4}, None, 60),
    ]
    assert [json.loads(m[2]) for m in data] == [{"page": "blog"}, {"page": "about"}, {"page": "home"}, {"page": "home"}]
    assert events[0]["ts_ms"] == 0 and events[0]["source"]["table"] == "counts"


def test_json_output_without_fields_writes_updates_as_arrays() -> None:
    enc = encoder("json", "reach", "t", progress_topic="tp")
    data, _ = enc.epoch(0, 100, "inc", 0, [((0, 5), 7, 1), ((1, 2), 3, -1)])
    assert [json.loads(m[3]) for m in data] == [[[1, 2], 3, -1], [[0, 5], 7, 1]]
    assert [json.loads(m[2]) for m in data] == [[1, 2], [0, 5]]
    assert reader("json").updates(data[0][3]) == [((1, 2), 3, -1)]


def test_restamp_names_the_new_incarnation_and_changes_nothing_else() -> None:
    enc = encoder("debezium", "counts", "t", fields=["page", "views"], progress_topic="tp")
    data, marker = enc.epoch(5, None, "first", 1, [(("a", 1), 7, 1)])
    again = enc.restamp(data[0], "second")
    assert again[:4] == data[0][:4] and read_epoch_header(again[4]) == ("second", 5, None)
    m = read_marker(enc.restamp(marker, "second")[3])
    assert (m.incarnation, m.lower, m.upper, m.count, m.partition) == ("second", 5, None, 1, 1)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"format": "debezium", "progress_topic": "p"}, "a debezium output needs the record's field names"),
    ({"format": "json", "fields": ["a"]}, "needs a companion progress topic"),
    ({"format": "json", "fields": ["a"], "progress_topic": "t"}, "is the data topic itself"),
    ({"format": "json", "fields": ["a", "b"], "key": ["c"], "progress_topic": "p"}, "must name distinct fields"),
    ({"format": "json", "fields": {"a": "any"}, "schemas": True, "progress_topic": "p"}, "need a type"),
    ({"format": "json", "fields": ["time", "x"], "progress_topic": "p"}, "'time' and 'diff'"),
    ({"format": "msgpack", "progress_topic": "p"}, "only the json and debezium formats"),
    ({"format": "avro"}, "'avro' is not one of"),
])
def test_encoder_options_are_checked(kwargs: dict[str, Any], fragment: str) -> None:
    fmt = kwargs.pop("format")
    with pytest.raises(OptionsError, match=fragment):
        encoder(fmt, "o", "t", **kwargs)


def test_unwritable_records_name_the_output() -> None:
    enc = encoder("json", "o", "t", fields=["page", "score"], progress_topic="p")
    with pytest.raises(WireError, match="output 'o'.*not a finite number"):
        enc.epoch(0, 1, "i", 0, [(("a", float("nan")), 0, 1)])
    with pytest.raises(WireError, match="is not a tuple of 2 values"):
        enc.epoch(0, 1, "i", 0, [(("a", 1, 2), 0, 1)])
    with pytest.raises(WireError, match="a set"):
        enc.epoch(0, 1, "i", 0, [(("a", {1}), 0, 1)])
