"""Secrets: client options whose values come from the environment or a file, never from the config.

A secret is referenced, not written: ``"sasl.password" = { env = "KAFKA_PASSWORD" }`` or
``{ file = "/run/secrets/kafka" }``. The reference is what gets logged; the value is read only when a
client is built and is wrapped in ``Secret``, whose ``repr``/``str`` never show it.

Which names are secret is decided here, once, case-insensitively (librdkafka names are lower case,
but ``"SASL.PASSWORD"`` must not slip through): ``sasl.jaas.config``, anything with ``password``,
``secret`` or ``token`` in it, ``ssl.key*`` (``ssl.key.password``, ``ssl.key.pem``,
``ssl.keystore.*``), ``*.pem`` and ``sasl.oauthbearer.config``. Such names are refused as plain
values in ``kafka.options`` (a password must not slip into a file that is committed or printed),
except ``*.location`` options, which hold a path to a key file rather than the key. ``mask`` hides
the values of every secret name, wherever it appears, in what is printed or logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Secret", "SecretRef", "is_secret_option", "is_inline_refused", "mask", "REDACTED"]

REDACTED = "***"

# Names whose values are credentials (sasl.password, sasl.jaas.config, ssl.key.password,
# ssl.keystore.password, sasl.oauthbearer.client.secret, ssl.key.pem, sasl.oauthbearer.config, ...),
# matched case-insensitively.
_SECRET_OPTION = re.compile(r"password|secret|token|jaas|^ssl\.key|\.pem$|sasl\.oauthbearer\.config",
                            re.IGNORECASE)
_PATH_OPTION = re.compile(r"\.location$", re.IGNORECASE)


def is_secret_option(name: str) -> bool:
    """True for names whose values must never be printed (any case: ``SASL.PASSWORD`` too)."""
    return bool(_SECRET_OPTION.search(name))


def is_inline_refused(name: str) -> bool:
    """True for secret names that must come from ``[kafka.secrets]``, not ``[kafka.options]``:
    every secret name except ``*.location`` ones (a path to a key file, not the key)."""
    return is_secret_option(name) and not _PATH_OPTION.search(name)


def mask(value: Any, name: str = "") -> Any:
    """``value`` with the values of secret names replaced by ``***``, at any depth (dicts keyed
    by secret names, lists of such dicts); what ``name`` itself holds is masked if it is secret.
    Use on anything printed or logged that a user wrote (client options, dataflow arguments)."""
    if name and is_secret_option(name):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(v) for v in value]
    return value


class Secret(str):
    """A resolved secret value: behaves as ``str`` for clients, prints as ``***``."""

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    def __str__(self) -> str:  # str(secret) / f-strings / logging never leak the value
        return REDACTED

    def reveal(self) -> str:
        """The plain value, for handing to a client library."""
        return str.__str__(self)


@dataclass(frozen=True)
class SecretRef:
    """Where one client option's secret value lives: an environment variable or a file."""

    option: str
    env: str | None = None
    file: Path | None = None

    def describe(self) -> str:
        """What may be logged: the reference, never the value."""
        if self.env is not None:
            return f"<secret from env {self.env}>"
        return f"<secret from file {self.file}>"

    def resolve(self, environ: Mapping[str, str] | None = None) -> Secret:
        """Read the value; raises ``LookupError`` naming the variable or file when it is missing."""
        environ = os.environ if environ is None else environ
        if self.env is not None:
            if self.env not in environ:
                raise LookupError(f"environment variable {self.env} is not set")
            return Secret(environ[self.env])
        assert self.file is not None
        try:
            text = self.file.read_text(encoding="utf-8")
        except OSError as exc:
            raise LookupError(f"cannot read secret file {self.file}: {exc.strerror}") from exc
        return Secret(text.rstrip("\r\n"))
