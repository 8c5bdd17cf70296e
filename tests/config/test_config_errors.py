"""Each class of config error names the file, the key and the problem (and never a secret)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddflow.config import ConfigError, load_config, parse_duration, resolve_dataflow
from support.configs import VALID


def write(tmp_path: Path, text: str, name: str = "daemon.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    for line in str(info.value).splitlines():
        assert line.startswith(f"{path}: "), line
    return info.value


def test_valid_baseline_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID))
    assert config.inputs[0].fields[1].name == "dst"
    assert config.epoch.resolution_ns == 1_000_000


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + "\n[[inputs]\nname = 1\n")
    assert err.keys == ["(syntax)"]
    assert "line" in str(err)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.toml")
    assert "missing.toml: (file): cannot read the config file" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "key", "fragment"),
    [
        # missing required keys
        (("function = \"ddflow.config.dataflows:reachability\"\n", ""), "dataflow.function", "is required"),
        (("topic = \"edges\"\n", ""), "inputs[0].topic", "is required"),
        (("[[outputs]]\nname = \"reachable\"\ntopic = \"reachable\"\n", ""), "outputs", "at least one [[outputs]]"),
        # unknown key, with the close match
        (("name = \"edges\"\n", "name = \"edges\"\nprogres = \"explicit\"\n"), "inputs[0].progres",
         "did you mean 'progress'"),
        # wrong type
        (("name = \"edges\"\n", "name = 7\n"), "inputs[0].name", "must be a string, not an integer (7)"),
        # value not among the choices
        (("name = \"edges\"\n", "name = \"edges\"\nlate = \"drop\"\n"), "inputs[0].late",
         "'drop' is not one of 'advance', 'reject'"),
        (("name = \"edges\"\n", "name = \"edges\"\nprogress = \"sometimes\"\n"), "inputs[0].progress",
         "not one of 'explicit', 'monotonic', 'reclock'"),
        # bad duration
        (("name = \"edges\"\n", "name = \"edges\"\nidle_timeout = \"5 parsecs\"\n"), "inputs[0].idle_timeout",
         "is not a duration"),
        (("name = \"edges\"\n", "name = \"edges\"\nidle_timeout = \"5s\"\n"), "inputs[0].idle_timeout",
         "only the 'monotonic' progress policy uses it (progress is 'explicit')"),
        (("name = \"edges\"\n", "name = \"edges\"\nmax_message_bytes = 0\n"), "inputs[0].max_message_bytes",
         "0 must be greater than 0"),
        # bad field type
        (("dst = \"int\"", "dst = \"integer\""), "inputs[0].fields.dst", "type 'integer' is not one of"),
        # bad dataflow reference syntax
        (("dataflows:reachability", "dataflows.reachability"), "dataflow.function",
         "is not a 'module:function' reference"),
        # bad topic name and bootstrap
        (("topic = \"edges\"", "topic = \"ed ges\""), "inputs[0].topic", "is not a Kafka topic name"),
        (("bootstrap = \"127.0.0.1:9092\"", "bootstrap = \"localhost\""), "kafka.bootstrap", "host:port"),
    ],
)
def test_each_error_class_names_its_key(tmp_path: Path, edit: tuple[str, str], key: str, fragment: str) -> None:
    old, new = edit
    assert old in VALID
    err = error_for(tmp_path, VALID.replace(old, new, 1))
    assert key in err.keys, str(err)
    assert fragment in str(err)


def test_sections_add_their_own_errors(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + """
[epoch]
resolution = "1ms"
max_records = "many"

[metrics]
address = "nowhere"

[checkpoint]
interval = "0s"

[dead_letter]
topic = "edges"
""")
    assert set(err.keys) == {"epoch.max_records", "metrics.address", "checkpoint.interval", "dead_letter.topic"}
    assert "must be an integer, not a string ('many')" in str(err)
    assert "'nowhere' is not host:port" in str(err)
    assert "'edges' is also an input topic" in str(err)


def test_all_problems_in_one_error(tmp_path: Path) -> None:
    text = VALID.replace('late = "x"', "") + """
[[outputs]]
name = "reachable"
topic = "edges"
"""
    err = error_for(tmp_path, text)
    assert set(err.keys) == {"outputs[1].name", "outputs[1].topic"}
    assert "'reachable' is already used by outputs[0]" in str(err)
    assert "'edges' is also an input topic" in str(err)


def test_epoch_max_updates_bounds_the_updates_fed_per_epoch(tmp_path: Path) -> None:
    from ddflow.daemon.service import make_worker
    from ddflow.daemon.observe.stats import Stats

    assert load_config(write(tmp_path, VALID)).epoch.max_updates == 100_000
    config = load_config(write(tmp_path, VALID + "[epoch]\nmax_updates = 5000\n"))
    assert config.epoch.max_updates == 5000 and config.redacted()["epoch"]["max_updates"] == 5000
    assert make_worker(config, Stats()).max_epoch_updates == 5000
    err = error_for(tmp_path, VALID + "[epoch]\nmax_updates = 0\n")
    assert err.keys == ["epoch.max_updates"]


def test_epoch_fixed_and_variable_conflict(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + '[epoch]\nresolution = "1ms"\nmax_delay = "5ms"\n')
    assert err.keys == ["epoch.resolution"]
    assert "not both" in str(err)


def test_plain_credential_in_options_is_refused_without_echoing_it(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + '[kafka.options]\n"sasl.password" = "hunter2-very-secret"\n')
    assert err.keys == ['kafka.options."sasl.password"']
    assert "[kafka.secrets]" in str(err)
    assert "hunter2" not in str(err)


JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username=\\"ddflow\\" '
        'password=\\"hunter2-in-jaas\\";')


@pytest.mark.parametrize(("name", "value"), [
    ("sasl.jaas.config", JAAS),
    ("SASL.PASSWORD", "hunter2-upper"),
    ("Ssl.Key.Password", "hunter2-mixed"),
    ("ssl.keystore.password", "hunter2-keystore"),
    ("ssl.key.pem", "hunter2-pem"),
    ("sasl.oauthbearer.client.secret", "hunter2-oauth"),
    ("sasl.oauthbearer.token.endpoint.url.Token", "hunter2-token"),
])
def test_every_kind_of_inline_credential_is_refused_in_any_case(tmp_path: Path, name: str, value: str) -> None:
    err = error_for(tmp_path, VALID + f'[kafka.options]\n"{name}" = "{value}"\n')
    assert err.keys == [f'kafka.options."{name}"']
    assert "is a credential" in str(err)
    assert "hunter2" not in str(err)


def test_key_file_locations_are_allowed_inline_but_masked_when_printed(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID + '[kafka.options]\n"ssl.keystore.location" = "/etc/kafka/x.p12"\n'
                                                 '"security.protocol" = "SSL"\n'))
    assert config.client_options()["ssl.keystore.location"] == "/etc/kafka/x.p12"
    printed = config.redacted()["kafka"]["options"]
    assert printed == {"ssl.keystore.location": "***", "security.protocol": "SSL"}


def test_secret_looking_dataflow_arguments_are_masked_when_printed(tmp_path: Path) -> None:
    text = VALID.replace("args = { roots = [0, 1] }",
                         'args = { roots = [0, 1], API_TOKEN = "hunter2-arg", nested = { db = { Password = '
                         '"hunter2-deep" }, rows = [{ client_secret = "hunter2-list" }] } }')
    config = load_config(write(tmp_path, text))
    assert config.dataflow.args["API_TOKEN"] == "hunter2-arg"  # the dataflow still gets the value
    printed = str(config.redacted())
    assert "hunter2" not in printed
    assert config.redacted()["dataflow"]["args"] == {
        "roots": [0, 1], "API_TOKEN": "***", "nested": {"db": {"Password": "***"}, "rows": [{"client_secret": "***"}]}}


def test_client_configs_are_redacted_in_any_case() -> None:
    from ddflow.daemon.kafka.client import redact

    shown = redact({"bootstrap.servers": "b:1", "SASL.PASSWORD": "x", "sasl.jaas.config": "y", "ssl.key.pem": "z",
                    "sasl.username": "u"})
    assert shown == {"bootstrap.servers": "b:1", "SASL.PASSWORD": "***", "sasl.jaas.config": "***",
                     "ssl.key.pem": "***", "sasl.username": "u"}


def test_misplaced_secret_value_is_not_echoed(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + '[kafka.secrets]\n"sasl.password" = "hunter2-very-secret"\n')
    assert err.keys == ['kafka.secrets."sasl.password"']
    assert "hunter2" not in str(err)


def test_secret_reference_needs_exactly_one_source(tmp_path: Path) -> None:
    err = error_for(tmp_path, VALID + '[kafka.secrets]\n"sasl.password" = { env = "A", file = "b" }\n')
    assert err.keys == ['kafka.secrets."sasl.password"']
    assert "exactly one of env" in str(err)


def test_secret_resolution_names_the_variable_and_never_logs_the_value(tmp_path: Path) -> None:
    secret_file = tmp_path / "key-password"
    secret_file.write_text("file-secret-value\n")
    config = load_config(write(tmp_path, VALID + """
[kafka.options]
"security.protocol" = "SASL_SSL"

[kafka.secrets]
"sasl.password" = { env = "TEST_DDFLOW_PW" }
"ssl.key.password" = { file = "key-password" }
"""))
    with pytest.raises(ConfigError) as info:
        config.client_options(environ={})
    assert info.value.keys == ['kafka.secrets."sasl.password"']
    assert "TEST_DDFLOW_PW is not set" in str(info.value)

    options = config.client_options(environ={"TEST_DDFLOW_PW": "env-secret-value"})
    assert options["sasl.password"] == "env-secret-value"
    assert options["ssl.key.password"] == "file-secret-value"
    assert options["bootstrap.servers"] == "127.0.0.1:9092"
    logged = repr(config) + str(config.redacted())
    assert "env-secret-value" not in logged and "file-secret-value" not in logged
    assert "<secret from env TEST_DDFLOW_PW>" in str(config.redacted())

    (tmp_path / "key-password").unlink()
    with pytest.raises(ConfigError) as info:
        config.client_options(environ={"TEST_DDFLOW_PW": "x"})
    assert info.value.keys == ['kafka.secrets."ssl.key.password"']
    assert "cannot read secret file" in str(info.value)


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
        ("ddflow.config.dataflows:nope", "has no attribute 'nope'"),
        ("ddflow.config.dataflows:__all__", "is not callable"),
        ("ddflow.config.dataflows:page_counts", "cannot be called as function(df, inputs, roots=...)"),
    ],
)
def test_dataflow_reference_errors_name_dataflow_function(tmp_path: Path, function: str, fragment: str) -> None:
    config = load_config(write(tmp_path, VALID.replace("ddflow.config.dataflows:reachability", function)))
    with pytest.raises(ConfigError) as info:
        resolve_dataflow(config)
    assert info.value.keys == ["dataflow.function"]
    assert fragment in str(info.value)


def test_dataflow_path_is_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "my_flow_for_path_test.py").write_text(
        "def build(df, inputs):\n    return {'reachable': inputs['edges']}\n")
    text = VALID.replace("ddflow.config.dataflows:reachability", "my_flow_for_path_test:build")
    text = text.replace("args = { roots = [0, 1] }", 'path = ["flows"]')
    config = load_config(write(tmp_path, text))
    assert config.dataflow.path == ((tmp_path / "flows").resolve(),)
    assert resolve_dataflow(config).__name__ == "build"


@pytest.mark.parametrize(("text", "ns"), [("1ms", 1_000_000), ("250us", 250_000), ("1.5s", 1_500_000_000),
                                          ("7ns", 7), ("2m", 120 * 10**9)])
def test_durations(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["1", "1 day", "ms", "-1ms", "0.5ns"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_supervision_and_transaction_timeouts(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID.replace('bootstrap = "127.0.0.1:9092"',
                                                       'bootstrap = "127.0.0.1:9092"\ntransaction_timeout = "90s"')
                               + '[worker]\nstall_timeout = "2m"\nstop_timeout = "20s"\n'))
    assert config.kafka.transaction_timeout_ns == 90 * 10**9
    assert (config.worker.stall_timeout_ns, config.worker.stop_timeout_ns) == (120 * 10**9, 20 * 10**9)
    assert config.redacted()["worker"] == {"stall_timeout_ns": 120 * 10**9, "stop_timeout_ns": 20 * 10**9,
                                           "frontier_stall_timeout_ns": 30 * 10**9}
    defaults = load_config(write(tmp_path, VALID))
    assert defaults.kafka.transaction_timeout_ns == 60 * 10**9 and defaults.worker.stop_timeout_ns == 75 * 10**9
    err = error_for(tmp_path, VALID.replace('bootstrap = "127.0.0.1:9092"',
                                            'bootstrap = "127.0.0.1:9092"\ntransaction_timeout = "10ms"')
                    + '[kafka.options]\n"transaction.timeout.ms" = 5000\n[worker]\nstall_timeout = "0s"\nstop_tmeout = "1s"\n')
    assert set(err.keys) == {"kafka.transaction_timeout", 'kafka.options."transaction.timeout.ms"',
                             "worker.stall_timeout", "worker.stop_tmeout"}
    assert "set it with kafka.transaction_timeout" in str(err) and "did you mean 'stop_timeout'" in str(err)


def test_commit_interval(tmp_path: Path) -> None:
    """kafka.commit_interval: the epochs closed within it commit in one transaction (default 50 ms)."""
    def with_kafka(line: str) -> str:
        return VALID.replace('bootstrap = "127.0.0.1:9092"', f'bootstrap = "127.0.0.1:9092"\n{line}')

    assert load_config(write(tmp_path, VALID)).kafka.commit_interval_ns == 50_000_000
    assert load_config(write(tmp_path, with_kafka('commit_interval = "5ms"'))).kafka.commit_interval_ns == 5_000_000
    assert load_config(write(tmp_path, with_kafka('commit_interval = "0s"'))).kafka.commit_interval_ns == 0
    assert load_config(write(tmp_path, VALID)).redacted()["kafka"]["commit_interval_ns"] == 50_000_000
    err = error_for(tmp_path, with_kafka('commit_interval = "90s"'))
    assert set(err.keys) == {"kafka.commit_interval"} and "shorter than kafka.transaction_timeout" in str(err)
    assert set(error_for(tmp_path, with_kafka('commit_interval = "soon"')).keys) == {"kafka.commit_interval"}
