"""Debian's kcat drives ``ddflow run``: JSON and Debezium events in, JSON and Debezium out.

The daemon runs ``config/examples/page-titles.toml`` (topic names and broker swapped in). kcat
runs the commands of docs/formats.md as written (they produce a Debezium table snapshot, JSON page views
and a progress marker, then read the results), then produces a second round: a Debezium rename,
delete (with its tombstone) and insert, more views and a retraction, a bad event and a bad JSON
line. After each round the results are checked against views computed here from what was sent,
twice: through ``ResultClient`` and from kcat's own reading of the data topics and the progress
topic (following the progress protocol with nothing from ddflow). The bad messages are in the
dead-letter counts, the tombstone in ``ddflow_input_tombstones_total``, and SIGTERM exits 0.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.docs import example
from support.broker import FETCH_WAIT_MS, create_topic
from support.daemons import DDFLOW, Daemon
from support.kcat import ensure_kcat, kcat, kcat_read
from test_cli_run import scrape, value  # type: ignore[import-not-found]

from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "examples" / "page-titles.toml"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
TOPICS = ("cms.public.pages", "page-views", "views-per-page", "views-per-title", "ddflow-progress",
          "ddflow-dead-letters")


def readme_block(lang: str) -> str:
    """The kcat walk-through of docs/formats.md (bash) or its result-client example (python)."""
    return example("kcat", lang) if lang == "bash" else example("debezium-result-client", lang)


def swap(text: str, names: dict[str, str], bootstrap: str) -> str:
    for old in sorted(names, key=len, reverse=True):
        text = text.replace(f'"{old}"', f'"{names[old]}"').replace(f" {old} ", f" {names[old]} ")
    return text.replace("127.0.0.1:9092", bootstrap)


def expected_views(views: list[tuple[int, str, int]], pages: dict[str, str]) -> tuple[dict[Any, int], dict[Any, int]]:
    """(views per page, views per title) for the view multiset and the pages table."""
    counts: Counter[str] = Counter()
    for _user, page, diff in views:
        counts[page] += diff
    per_title: Counter[str] = Counter()
    for page, n in counts.items():
        if page in pages:
            per_title[pages[page]] += n
    return ({(p, n): 1 for p, n in counts.items() if n}, {(t, n): 1 for t, n in per_title.items() if n})


def kcat_view(bootstrap: str, topic: str, progress: str, fmt: str) -> tuple[int, dict[Any, int]]:
    """The frontier and the view of an output read by kcat alone: every marker of ``topic`` on
    the progress topic must match the data messages carrying its epoch in their header."""
    markers = [json.loads(m["payload"]) for m in kcat_read(bootstrap, progress)]
    markers = [m for m in markers if m["topic"] == topic]
    epochs: Counter[tuple[int, str, int, int]] = Counter()
    view: Counter[Any] = Counter()
    for msg in kcat_read(bootstrap, topic):
        headers = dict(zip(msg["headers"][::2], msg["headers"][1::2]))
        epoch = json.loads(headers["ddflow-epoch"])
        epochs[(msg["partition"], epoch["incarnation"], epoch["lower"], epoch["upper"])] += 1
        if msg["payload"] is None:  # the tombstone after a debezium delete: counted, no change
            continue
        event = json.loads(msg["payload"])
        if fmt == "json":
            view[(event["page"], event["views"])] += event["diff"]
            continue
        if event["before"] is not None:
            view[(event["before"]["title"], event["before"]["views"])] -= 1
        if event["after"] is not None:
            view[(event["after"]["title"], event["after"]["views"])] += 1
    for m in markers:
        assert epochs[(m["partition"], m["incarnation"], m["lower"], m["upper"])] == m["count"], m
    frontier = min(max(m["upper"] for m in markers if m["partition"] == p) for p in {m["partition"] for m in markers})
    return frontier, {record: n for record, n in view.items() if n}


def test_kcat_drives_json_and_debezium_through_ddflow_run(kcat_broker: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ensure_kcat()
    bootstrap = kcat_broker
    tag = uuid.uuid4().hex[:6]
    names = {t: f"{t}-{tag}" for t in TOPICS}
    for topic, partitions in ((names["cms.public.pages"], 1), (names["page-views"], 1),
                              (names["views-per-page"], 2), (names["views-per-title"], 3),
                              (names["ddflow-progress"], 1), (names["ddflow-dead-letters"], 1)):
        create_topic(bootstrap, topic, partitions)
    config = tmp_path / "page-titles.toml"
    config.write_text(swap(EXAMPLE.read_text(), names, bootstrap).replace(
        'group_id = "ddflow-page-titles"', f'group_id = "page-titles-{tag}"\n\n[kafka.options]\n'
        f'"fetch.wait.max.ms" = {FETCH_WAIT_MS}') + '\n[metrics]\naddress = "127.0.0.1:0"\n')
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    daemon = Daemon(config)
    try:
        url = daemon.wait_for(r"metrics on (http://[\d.]+:\d+)/metrics").group(1)
        daemon.wait_for(r"inputs assigned")

        # round 1: the guide's commands, as written
        script = "\n".join(line for line in readme_block("bash").splitlines() if not line.startswith("ddflow run"))
        done = subprocess.run(["bash", "-e", "-c", swap(script, names, bootstrap)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        views = [(1, "home", 1), (2, "home", 1), (3, "about", 1), (1, "about", 1)]
        pages = {"home": "Home", "about": "About us"}
        check(bootstrap, names, options, T0 + 10 * MS, expected_views(views, pages), daemon)
        # what the guide says the Debezium output then holds, and what its snippet prints
        events = [(json.loads(m["key"]), json.loads(m["payload"])) for m in kcat_read(bootstrap, names["views-per-title"])]
        assert sorted((key["title"], e["op"], e["ts_ns"], (e["before"] or {}).get("views"), e["after"]["views"])
                      for key, e in events) == [
            ("About us", "c", T0 + 3 * MS, None, 2), ("Home", "c", T0 + 1 * MS, None, 1),
            ("Home", "u", T0 + 2 * MS, 1, 2)]
        code = swap(readme_block("python"), names, bootstrap)
        exec(compile(code, "docs/formats.md", "exec"), {})
        printed = capsys.readouterr().out.strip()
        assert printed == readme_block("python").split("# ")[-1].strip() == "{('Home', 2): 1, ('About us', 2): 1}"

        # round 2: a rename, a delete and its tombstone, an insert, a bad event; more views, a
        # retraction and a line that is not JSON; then a progress marker
        ms = T0 // MS
        kcat(bootstrap, "-P", "-t", names["cms.public.pages"], "-Z", "-K", "|", input="\n".join([
            '{"page":"about"}|' + json.dumps({"before": {"page": "about", "title": "About us"},
                                              "after": {"page": "about", "title": "About"},
                                              "op": "u", "ts_ms": ms + 20}),
            '{"page":"home"}|' + json.dumps({"before": {"page": "home", "title": "Home"}, "after": None,
                                             "op": "d", "ts_ms": ms + 21}),
            '{"page":"home"}|',  # the tombstone: a null value
            '{"page":"blog"}|' + json.dumps({"before": None, "after": {"page": "blog", "title": "Blog"}, "op": "c",
                                             "ts_ms": ms + 22, "source": {"connector": "postgresql"}}),
            '{"page":"x"}|' + json.dumps({"before": None, "after": {"page": "x", "title": "X"}, "op": "u",
                                          "ts_ms": ms + 23}),  # an update without its before-image
        ]) + "\n")
        # The pages partition has been idle for longer than its idle_timeout, so it does not hold the
        # frontier: a views marker read before these events would make them late. A producer that
        # needs them inside the next epoch waits until the daemon has read them (as docs/formats.md
        # says of "everything I produced"): here, until its counters show them.
        read_pages(url)
        kcat(bootstrap, "-P", "-t", names["page-views"], input="\n".join([
            json.dumps({"user": 4, "page": "home", "time": T0 + 25 * MS, "diff": 1}),
            json.dumps([[5, "blog"], T0 + 26 * MS, 1]),
            json.dumps({"user": 1, "page": "about", "time": T0 + 27 * MS, "diff": -1}),
            "not json",
            json.dumps({"progress": T0 + 40 * MS}),
        ]) + "\n")
        views += [(4, "home", 1), (5, "blog", 1), (1, "about", -1)]
        pages = {"about": "About", "blog": "Blog"}
        check(bootstrap, names, options, T0 + 40 * MS, expected_views(views, pages), daemon)

        # one retraction and one insertion of one key at one time: one u event
        events = [json.loads(m["payload"]) for m in kcat_read(bootstrap, names["views-per-title"])
                  if m["payload"] is not None]  # tombstones follow deletes
        assert {"op": "u", "before": {"title": "About", "views": 2}, "after": {"title": "About", "views": 1},
                "ts_ns": T0 + 27 * MS} in [{k: e[k] for k in ("op", "before", "after", "ts_ns")} for e in events]

        # ddflow tail reads it too
        tail = subprocess.run([DDFLOW, "tail", "--topic", names["views-per-title"], "--format", "debezium",
                               "--progress-topic", names["ddflow-progress"], "--bootstrap", bootstrap,
                               "--duration", "1", "--json"], capture_output=True, text=True, timeout=120)
        assert tail.returncode == 0, tail.stderr
        first = json.loads(tail.stdout.splitlines()[0])
        assert first["frontier"] == T0 + 40 * MS
        assert {tuple(record): n for record, n in first["view"]} == expected_views(views, pages)[1]

        _, values = scrape(url)
        assert value(values, "ddflow_input_tombstones_total", input="pages") == 1
        assert value(values, "ddflow_dead_letters_total", input="pages", reason="bad_event") == 1
        assert value(values, "ddflow_dead_letters_total", input="views", reason="bad_json") == 1
        assert value(values, "ddflow_input_updates_total", input="views") == len(views)
        assert value(values, "ddflow_input_updates_total", input="pages") == 6  # r, c, u (two updates), d, c
        assert sum(n for (name, labels), n in values.items()
                   if name == "ddflow_late_updates_total" and ("input", "pages") in labels) == 0

        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0, daemon.log
    finally:
        daemon.kill()


def read_pages(url: str, timeout: float = 120) -> None:
    """Wait until the daemon has read round 2's pages events: four updates and the tombstone."""
    deadline = time.monotonic() + timeout
    while True:
        _, values = scrape(url)
        if (value(values, "ddflow_input_updates_total", input="pages") == 6
                and value(values, "ddflow_input_tombstones_total", input="pages") == 1):
            return
        assert time.monotonic() < deadline, "the daemon did not read round 2's pages events"
        time.sleep(0.05)


def check(bootstrap: str, names: dict[str, str], options: dict[str, Any], frontier: int,
          expected: tuple[dict[Any, int], dict[Any, int]], daemon: Daemon) -> None:
    """Both outputs at ``frontier`` equal ``expected``, through ResultClient and through kcat."""
    progress = names["ddflow-progress"]
    for (output, fmt, fields), want in zip((("views-per-page", "json", ["page", "views"]),
                                            ("views-per-title", "debezium", ["title", "views"])), expected):
        with ResultClient(names[output], options, format=fmt, progress_topic=progress, fields=fields) as client:
            assert client.wait_for(frontier, timeout=120), daemon.log
            assert client.frontier == frontier and client.stats.incomplete_epochs == 0
            assert client.view == want
        assert kcat_view(bootstrap, names[output], progress, fmt) == (frontier, want)
