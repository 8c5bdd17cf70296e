"""The light commands stay light: `ddflow --help`, `produce` and `tail` import neither the Arrow/Spark
stack nor (for help) the Kafka client or the engine; the daemon package loads its modules on use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pyarrow", "pyspark", "pandas", "confluent_kafka", "numpy", "numba")


def loaded_after(code: str) -> set[str]:
    probe = f"""
import json, sys
{code}
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--help"], ["produce", "--help"], ["tail", "--help"], ["run", "--help"]])
def test_help_imports_nothing_heavy(argv):
    code = f"""
from ddflow.daemon.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
"""
    assert loaded_after(code) == set()


def test_produce_and_tail_modules_leave_arrow_and_spark_alone():
    loaded = loaded_after("import ddflow.daemon.kafka.producer, ddflow.daemon.kafka.results")
    assert not loaded & {"pyarrow", "pyspark", "pandas"}, loaded


def test_the_daemon_package_loads_its_public_names_on_use():
    code = "import ddflow.daemon as d\nassert 'confluent_kafka' not in sys.modules\nd.UpdateProducer"
    assert "confluent_kafka" in loaded_after(code)
