"""Reading a json output in ``mode = "upsert"`` back, on the real broker: `ResultClient` and
``ddflow tail`` keep the row per message key, apply an epoch's rows once its marker accepts it,
and turn a tombstone into the retraction of the key's row; a restarting sink reads its upsert
output's positions without decoding rows as change-log updates."""

from __future__ import annotations

import json
import textwrap

import pytest
from test_connect_outputs import FIELDS, publish, table_epochs  # type: ignore[import-not-found]

from ddflow.daemon.cli.parser import main
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.operators.lattice import T_MIN

pytestmark = pytest.mark.kafka

EPOCHS = [  # (lower, upper, updates) of a one-row-per-key output
    (T_MIN, 10, [(("/a", 1), 9, 1), (("/b", 2), 9, 1)]),
    (10, 20, [(("/a", 1), 12, -1), (("/a", 3), 12, 1), (("/b", 2), 15, -1)]),  # /b leaves: a tombstone
    (20, 30, [(("/b", 5), 25, 1), (("/a", 3), 26, -1), (("/a", 3), 27, 1)]),  # /a: no net change, no message
]


def test_result_client_follows_an_upsert_output(kafka_options, make_topic, capsys, tmp_path):
    topic, progress = make_topic("views", partitions=2), make_topic("progress", partitions=1)
    spec = OutputSpec("views", topic, format="json", fields=FIELDS, progress_topic=progress, mode="upsert")
    publish(kafka_options, spec, EPOCHS)
    with ResultClient(topic, kafka_options, format="json", progress_topic=progress, fields=FIELDS,
                      mode="upsert") as client:
        changes = []
        for change in client.changes(timeout=30):
            changes.append((change.frontier, sorted(change.updates), dict(client.view)))
            if change.frontier == 30:
                break
    assert changes == [
        (10, [(("/a", 1), 9, 1), (("/b", 2), 9, 1)], {("/a", 1): 1, ("/b", 2): 1}),
        (20, [(("/a", 1), 19, -1), (("/a", 3), 19, 1), (("/b", 2), 19, -1)], {("/a", 3): 1}),  # the tombstone
        (30, [(("/b", 5), 29, 1)], {("/a", 3): 1, ("/b", 5): 1}),
    ]
    code = main(["tail", "--topic", topic, "--bootstrap", kafka_options["bootstrap.servers"], "--format", "json",
                 "--progress-topic", progress, "--fields", "page,views", "--upsert", "--json", "--duration", "1"])
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert code == 0 and (first["frontier"], first["view"]) == (30, [[["/a", 3], 1], [["/b", 5], 1]])
    config = tmp_path / "daemon.toml"  # tail --config --output takes the output's topic, format and mode
    config.write_text(textwrap.dedent(f"""
        [dataflow]
        function = "ddflow.config.dataflows:views_by_title"
        [kafka]
        bootstrap = "{kafka_options['bootstrap.servers']}"
        [[inputs]]
        name = "views"
        topic = "page-views"
        fields = {{ user = "int", page = "str" }}
        [[outputs]]
        name = "views_per_page"
        topic = "{topic}"
        format = "json"
        fields = {{ page = "str", views = "int" }}
        progress_topic = "{progress}"
        mode = "upsert"
        """), encoding="utf-8")
    code = main(["tail", "--config", str(config), "--output", "views_per_page", "--duration", "1"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("view at frontier 30: 2 records\n  ('/a', 3)\n  ('/b', 5)\n"), out

    # a sink restarting on the topic reads where it stopped (its rows are not change-log updates)
    sink = KafkaSink([spec], kafka_options, transactional_id=f"tx-{topic}")
    sink.open()
    try:
        assert sink.final[topic] == [30, 30] and sink.resume_stats.epochs == 6
    finally:
        sink.close()


def test_upsert_view_matches_the_table_over_random_epochs(kafka_options, make_topic):
    """Random changes, deletes and re-inserts (`test_connect_outputs.table_epochs`): the view at
    each accepted epoch is the table as of the epoch's end, every record with multiplicity one."""
    topic, progress = make_topic("views", partitions=3), make_topic("progress", partitions=1)
    epochs, final = table_epochs(11, keys=20, epochs=8)
    spec = OutputSpec("views", topic, format="json", fields=FIELDS, progress_topic=progress, mode="upsert")
    publish(kafka_options, spec, epochs)
    expected: dict[tuple[str, int], int] = {}
    views = {}
    for lower, upper, updates in epochs:
        for record, _, diff in updates:
            expected[record] = expected.get(record, 0) + diff
        views[upper] = {r: n for r, n in expected.items() if n}
    with ResultClient(topic, kafka_options, format="json", progress_topic=progress, fields=FIELDS,
                      mode="upsert") as client:
        for change in client.changes(timeout=30):
            assert client.view == views[change.frontier]
            if change.frontier == epochs[-1][1]:
                break
    assert client.view == {(p, v): 1 for p, v in final.items()}
