"""What the test suites share: loaded by the root conftest through ``pytest_plugins``.

* `support.broker`: the session's Kafka-protocol broker and fresh topics (fixtures), topic helpers;
* `support.kcat`: the kcat client and a broker it can talk to;
* `support.profiles`: the hypothesis settings profiles, registered and loaded once;
* `support.workers`: how many workers the oracle and library suites share a dataflow among;
* `support.oracles`: the from-scratch references and the seeded workloads several suites share;
* `support.docs`: the named examples and sections of README.md and docs/;
* `support.results`: a msgpack result topic as it lies on the broker, and a reader's state (failures);
* `support.locks`: a machine-wide lock, for what one of the suite's processes sets up for all.

``tests/`` is on the import path (``pythonpath`` in pyproject.toml), so a test imports these as
``from support.broker import read_topic``.
"""
