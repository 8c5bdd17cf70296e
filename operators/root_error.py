"""The root of every ddflow error.

    DdflowError                 root of every error ddflow raises (engine, config, daemon)
    ├── DataflowError           the engine's (`ddflow.operators.errors`)
    ├── ConfigError             the configuration's (`ddflow.config.errors`)
    └── DaemonError             the daemon's (`ddflow.daemon.exceptions`)

It lives in a module of its own that imports nothing, at the bottom of the layers: the engine
raises it without importing the configuration package, and ``ddflow.config`` and ``ddflow.daemon``
re-export it (importing it loads no kernel and no Kafka client, so ``ddflow --help`` stays light).
``except DdflowError`` catches every error that names a ddflow step; anything else escaping ddflow
is a bug.
"""

from __future__ import annotations

__all__ = ["DdflowError"]


class DdflowError(Exception):
    """Root of every error ddflow raises: the engine's, the configuration's and the daemon's."""
