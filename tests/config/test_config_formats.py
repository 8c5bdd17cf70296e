"""Config keys of the wire formats: ``format`` per input and output, ``debezium_time``, and the
json/debezium outputs' ``fields``, ``key``, ``progress_topic`` and ``schemas``; every misuse
names its key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddflow.config import ConfigError, load_config

BASE = """
[dataflow]
function = "ddflow.config.dataflows:page_counts"

[kafka]
bootstrap = "127.0.0.1:9092"

[[inputs]]
name = "views"
topic = "views"
fields = {{ user = "int", page = "str" }}
{input}

[[outputs]]
name = "page_views"
topic = "page-views"
{output}
"""


def load(tmp_path: Path, input: str = "", output: str = "") -> object:
    path = tmp_path / "daemon.toml"
    path.write_text(textwrap.dedent(BASE.format(input=input, output=output)), encoding="utf-8")
    return load_config(path)


def problems(tmp_path: Path, input: str = "", output: str = "") -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, input, output)
    return {p.key: p.message for p in info.value.problems}


def test_defaults_are_msgpack(tmp_path: Path) -> None:
    config = load(tmp_path)
    assert config.inputs[0].format == "msgpack" and config.outputs[0].format == "msgpack"  # type: ignore[attr-defined]
    assert config.outputs[0].progress_topic is None  # type: ignore[attr-defined]


def test_json_and_debezium_configs_load_with_their_options(tmp_path: Path) -> None:
    config = load(tmp_path, 'format = "debezium"\nprogress = "monotonic"\ndebezium_time = "source"',
                  'format = "debezium"\nfields = { page = "str", views = "int" }\n'
                  'progress_topic = "page-views-progress"\nschemas = true')
    i, o = config.inputs[0], config.outputs[0]  # type: ignore[attr-defined]
    assert (i.format, i.progress, i.debezium_time) == ("debezium", "monotonic", "source")
    assert (o.format, [f.name for f in o.fields], o.key, o.progress_topic, o.schemas) == (
        "debezium", ["page", "views"], ("page",), "page-views-progress", True)
    shown = config.redacted()  # type: ignore[attr-defined]
    assert shown["inputs"][0]["format"] == "debezium" and shown["inputs"][0]["debezium_time"] == "source"
    assert shown["outputs"][0]["key"] == ["page"] and shown["outputs"][0]["progress_topic"] == "page-views-progress"
    config = load(tmp_path, 'format = "json"', 'format = "json"\nprogress_topic = "p"\nkey = "views"\n'
                  'fields = ["page", "views"]')
    assert config.outputs[0].key == ("views",)  # type: ignore[attr-defined]
    assert load(tmp_path, "", 'format = "json"\nprogress_topic = "p"').outputs[0].fields == ()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("input", "output", "key", "fragment"), [
    ('format = "debezium"', "", "inputs[0].progress", "a debezium input carries no progress markers"),
    ('format = "debezium"\nprogress = "explicit"', "", "inputs[0].progress", "'monotonic'"),
    ('format = "avro"', "", "inputs[0].format", "'avro' is not one of 'msgpack', 'json', 'debezium'"),
    ('debezium_time = "source"', "", "inputs[0].debezium_time", "only debezium inputs use it"),
    ('format = "debezium"\nprogress = "reclock"\ndebezium_time = "commit"', "", "inputs[0].debezium_time",
     "'commit' is not one of 'envelope', 'source'"),
    ("", 'format = "json"', "outputs[0].progress_topic", "is required"),
    ("", 'format = "json"\nprogress_topic = "page-views"', "outputs[0].progress_topic", "the output's own topic"),
    ("", 'format = "json"\nprogress_topic = "views"', "outputs[0].progress_topic", "also an input topic"),
    ("", 'format = "debezium"\nprogress_topic = "p"', "outputs[0].fields", "is required"),
    ("", 'format = "json"\nprogress_topic = "p"\nfields = ["page", "views"]\nkey = "user"', "outputs[0].key",
     "must name distinct fields of ['page', 'views']"),
    ("", 'format = "json"\nprogress_topic = "p"\nkey = "page"', "outputs[0].key", "name the record's fields"),
    ("", 'format = "json"\nprogress_topic = "p"\nfields = ["page", "views"]\nschemas = true', "outputs[0].schemas",
     "need a type for every field"),
    ("", 'format = "json"\nprogress_topic = "p"\nfields = ["page", "time"]', "outputs[0].fields", "'time'"),
    ("", 'progress_topic = "p"', "outputs[0].progress_topic", "only json and debezium outputs use it"),
    ("", "schemas = true", "outputs[0].schemas", "only json and debezium outputs use it"),
    ("", 'format = "json"\nprogress_topic = "p"\nschema = true', "outputs[0].schema", "did you mean 'schemas'"),
])
def test_each_format_misuse_names_its_key(tmp_path: Path, input: str, output: str, key: str, fragment: str) -> None:
    found = problems(tmp_path, input, output)
    assert key in found and fragment in found[key], found


def test_json_input_fields_cannot_be_named_time_or_diff(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    text = textwrap.dedent(BASE.format(input='format = "json"', output="")).replace(
        'fields = { user = "int", page = "str" }', 'fields = ["user", "time"]')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "inputs[0].fields: field 'time': in the json format 'time' and 'diff' are the update's own keys" \
        in str(info.value)


def test_connect_output_options_load(tmp_path: Path) -> None:
    config = load(tmp_path, "", 'format = "json"\nfields = { page = "str", views = "int" }\n'
                  'progress_topic = "p"\nmode = "upsert"\npartitioner = "murmur2"')
    o = config.outputs[0]  # type: ignore[attr-defined]
    assert (o.mode, o.partitioner, o.tombstones) == ("upsert", "murmur2", True)
    assert config.redacted()["outputs"][0]["mode"] == "upsert"  # type: ignore[attr-defined]
    o = load(tmp_path, "", 'format = "debezium"\nfields = ["page"]\nprogress_topic = "p"\ntombstones = false'
             ).outputs[0]  # type: ignore[attr-defined]
    assert (o.mode, o.partitioner, o.tombstones) == ("changelog", "ddflow", False)


@pytest.mark.parametrize("output, key, says", [
    ('partitioner = "murmur2"', "outputs[0].partitioner", "no message key per record"),
    ('format = "json"\nprogress_topic = "p"\nfields = ["page"]\npartitioner = "murmur3"', "outputs[0].partitioner",
     "'murmur3' is not one of 'ddflow', 'murmur2'"),
    ('format = "json"\nprogress_topic = "p"\nmode = "upsert"', "outputs[0].mode", "needs the record's fields"),
    ('format = "json"\nprogress_topic = "p"\nfields = ["page"]\nmode = "table"', "outputs[0].mode",
     "'table' is not one of 'changelog', 'upsert'"),
    ('format = "debezium"\nprogress_topic = "p"\nfields = ["page"]\nmode = "upsert"', "outputs[0].mode",
     "only json outputs use it"),
    ('format = "json"\nprogress_topic = "p"\ntombstones = false', "outputs[0].tombstones",
     "only debezium outputs use it"),
])
def test_connect_output_options_misused_name_their_key(tmp_path: Path, output: str, key: str, says: str) -> None:
    found = problems(tmp_path, "", output)
    assert key in found and says in found[key], found
