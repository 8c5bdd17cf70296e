"""Secrets: client options whose values come from the environment or a file, never from the config.

A secret is referenced, not written: ``"sasl.password" = { env = "KAFKA_PASSWORD" }`` or
``{ file = "/run/secrets/kafka" }``. The reference is what gets logged; the value is read only when a
client is built and is wrapped in ``Secret``, whose ``repr``/``str`` never show it. Option names that
look like secrets are refused as plain values in ``kafka.options`` so a password cannot slip into a
file that is committed or printed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Secret", "SecretRef", "is_secret_option", "REDACTED"]

REDACTED = "***"

# librdkafka options that hold credentials (sasl.password, ssl.key.password, ssl.keystore.password,
# sasl.oauthbearer.client.secret, ssl.key.pem, sasl.oauthbearer.config, ...).
_SECRET_OPTION = re.compile(r"(password|secret|\.pem$|^ssl\.key\.|sasl\.oauthbearer\.config|token)")


def is_secret_option(name: str) -> bool:
    """True for client option names whose values are credentials."""
    return bool(_SECRET_OPTION.search(name))


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
