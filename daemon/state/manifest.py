"""A snapshot's manifest: what it holds and where, under its own checksum.

``MANIFEST.json`` names the snapshot's format (`FORMAT`; a `LEGACY_FORMATS` snapshot is sharded
by another hash and read whole), its frontier, its shard count, where it came from (``origin``:
a checkpoint or a backfill), and per input collection (`InputEntry`) the topic, the columns, the
offsets where consumption resumes and every file of its ``base`` and ``pending`` parts (shard,
rows, bytes, sha256). The JSON carries the sha256 of the rest of its content, so a torn or edited
manifest is refused (`Manifest.from_json` raises `SnapshotError` naming what is wrong) before any
file is read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import SnapshotError
from .shards import Column, FileEntry
from ...operators.lattice import T_MAX, T_MIN

__all__ = ["FORMAT", "LEGACY_FORMATS", "MANIFEST", "InputEntry", "Manifest"]

FORMAT = "ddflow-snapshot/2"
LEGACY_FORMATS = frozenset({"ddflow-snapshot/1"})  # readable whole: sharded by another hash
MANIFEST = "MANIFEST.json"


@dataclass(frozen=True)
class InputEntry:
    """One input collection in a snapshot. ``offsets`` None: none recorded (read from the start)."""

    name: str
    topic: str
    columns: tuple[Column, ...]
    offsets: dict[int, int] | None
    base: tuple[FileEntry, ...] = ()
    pending: tuple[FileEntry, ...] = ()

    @property
    def base_rows(self) -> int:
        return sum(f.rows for f in self.base)

    @property
    def pending_rows(self) -> int:
        return sum(f.rows for f in self.pending)


@dataclass(frozen=True)
class Manifest:
    frontier: int
    shards: int
    origin: str  # "checkpoint" or "backfill"
    created: str
    inputs: dict[str, InputEntry] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT  # LEGACY_FORMATS: sharded by another hash

    def to_json(self) -> str:
        body = {
            "format": self.format,
            "frontier": self.frontier,
            "shards": self.shards,
            "origin": self.origin,
            "created": self.created,
            "extra": self.extra,
            "inputs": {
                name: {
                    "topic": e.topic,
                    "columns": [{"name": c.name, "type": c.type} for c in e.columns],
                    "offsets": None if e.offsets is None else {str(p): o for p, o in sorted(e.offsets.items())},
                    "base": [_file_json(f) for f in e.base],
                    "pending": [_file_json(f) for f in e.pending],
                }
                for name, e in self.inputs.items()
            },
        }
        body["checksum"] = _checksum(body)
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise SnapshotError(f"{where}: not valid JSON, the manifest is torn or corrupt ({exc})") from exc
        if not isinstance(body, dict) or (body.get("format") != FORMAT and body.get("format") not in LEGACY_FORMATS):
            got = body.get("format") if isinstance(body, dict) else type(body).__name__
            raise SnapshotError(f"{where}: format {got!r} is not {FORMAT!r}")
        stated = body.pop("checksum", None)
        if stated != _checksum(body):
            raise SnapshotError(f"{where}: checksum {stated!r} does not match the content (corrupt manifest)")
        try:
            inputs = {}
            for name, e in body["inputs"].items():
                offsets = e["offsets"]
                inputs[name] = InputEntry(
                    name,
                    e["topic"],
                    tuple(Column(c["name"], c["type"]) for c in e["columns"]),
                    None if offsets is None else {int(p): int(o) for p, o in offsets.items()},
                    tuple(FileEntry(**f) for f in e["base"]),
                    tuple(FileEntry(**f) for f in e["pending"]),
                )
            manifest = cls(int(body["frontier"]), int(body["shards"]), str(body["origin"]), str(body["created"]),
                           inputs, dict(body.get("extra") or {}), str(body["format"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{where}: malformed manifest ({type(exc).__name__}: {exc})") from exc
        if not T_MIN < manifest.frontier <= T_MAX:
            raise SnapshotError(f"{where}: frontier {manifest.frontier} is outside (T_MIN, T_MAX]")
        return manifest


def _file_json(f: FileEntry) -> dict[str, Any]:
    return {"path": f.path, "shard": f.shard, "rows": f.rows, "bytes": f.bytes, "sha256": f.sha256}


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
