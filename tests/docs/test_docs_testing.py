"""The testing guide's quick run names real folders and registered markers and profiles; the
hypothesis profile stays the one chosen whatever helper modules are imported; the broker fixtures
mark their tests ``kafka`` so the quick run's ``-m`` leaves them out."""

from __future__ import annotations

import importlib
import shlex
import tomllib
from types import SimpleNamespace

import pytest
from hypothesis import settings

from support import broker, profiles
from support.docs import ROOT, example


def test_the_quick_run_names_real_folders_markers_and_a_profile() -> None:
    words = shlex.split(example("quick-test-command", "bash"))
    assert words[0] == "HYPOTHESIS_PROFILE=quick" and "quick" in profiles.EXAMPLES
    assert words[1:5] == [".venv/bin/python", "-m", "pytest", "-q"]
    assert words[5] == "-m"
    declared = {m.split(":")[0] for m in tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(words[6].replace("not", "").replace("and", "").split()) <= declared
    paths = words[7:]
    assert paths and all((ROOT / p).exists() for p in paths), paths
    assert not any(p.startswith(("tests/daemon", "tests/cli", "tests/recovery", "tests/backfill")) for p in paths)


def test_importing_the_suites_helpers_leaves_the_chosen_profile_loaded(monkeypatch) -> None:
    chosen = settings.default.max_examples
    assert chosen == profiles.EXAMPLES[profiles.PROFILE]
    for folder, helpers in (("operators", "oracle_harness"), ("library", "library_streams")):
        monkeypatch.syspath_prepend(str(ROOT / "tests" / folder))
        importlib.import_module(helpers)
        assert settings.default.max_examples == chosen, helpers


@pytest.mark.parametrize(("fixtures", "marked"), [
    (("make_topic", "kafka_broker", "tmp_path"), True),
    (("kcat_broker",), True),
    (("tmp_path",), False),
])
def test_tests_that_use_a_broker_fixture_are_marked_kafka(fixtures, marked) -> None:
    added: list = []
    item = SimpleNamespace(fixturenames=fixtures, add_marker=added.append)
    broker.pytest_collection_modifyitems([item])
    assert [m.name for m in added] == (["kafka"] if marked else [])


def test_the_quick_profile_caps_a_property_that_names_its_own_count() -> None:
    from hypothesis import given, strategies as st

    seen: list = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.integers())
    def many(x: int) -> None:
        seen.append(x)

    assert profiles.capped(many, 10) and not profiles.capped(many, 10) and not profiles.capped(len, 10)
    many()
    assert 0 < len(seen) <= 10
