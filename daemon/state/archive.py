"""A backfill's archive: Parquet files of updates, read in Spark and checked against the fields.

The archive of an input holds one column per record field, ``time`` (integer nanoseconds) and
``diff`` (integer). `read_archive` selects the declared fields cast to the Spark type of their
declared type (``any`` fields, stored as msgpack, from any scalar type) as columns ``v0..vN``
with ``time`` and ``diff``; `check_archive` makes one pass for the row count, the largest time and
nulls where a type forbids them. Both raise `BackfillError` naming the input and the column.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import BackfillError
from .shards import Column, columns_for_fields

__all__ = ["Archive", "Progress", "check_archive", "read_archive"]

Progress = Callable[[str], None]

# declared field type -> Spark types accepted for it, and the Spark type it is cast to
_ACCEPTED = {
    "int": ({"tinyint", "smallint", "int", "bigint"}, "bigint"),
    "float": ({"tinyint", "smallint", "int", "bigint", "float", "double"}, "double"),
    "str": ({"string"}, "string"),
    "bytes": ({"binary"}, "binary"),
    "bool": ({"boolean"}, "boolean"),
}
# the Spark type an ``any`` field (stored as msgpack) is read as
_ANY = {"tinyint": "bigint", "smallint": "bigint", "int": "bigint", "bigint": "bigint", "float": "double",
        "double": "double", "string": "string", "binary": "binary", "boolean": "boolean"}


@dataclass(frozen=True)
class Archive:
    """An input's archive, read: a Spark DataFrame and the snapshot columns it becomes."""

    df: Any  # columns v0..vN (the fields, cast), time, diff
    columns: tuple[Column, ...]  # the snapshot's columns
    declared: dict[str, str]  # field name -> declared type


def read_archive(spark: Any, name: str, paths: Sequence[str | os.PathLike[str]],
                 fields: Sequence[str] | Mapping[str, str] | None) -> Archive:
    """Input ``name``'s archive (Parquet files or directories at ``paths``) with its fields cast
    to their declared types (``fields``: names, name -> type, or None for every column but
    ``time`` and ``diff``, each read as ``any``), time and diff; the snapshot's columns.
    `BackfillError` names a missing or ill-typed column."""
    from pyspark.sql import functions as F

    where = f"backfill input {name!r}"
    if not paths:
        raise BackfillError(f"{where}: no archive paths given")
    try:
        df = spark.read.parquet(*[str(p) for p in paths])
    except Exception as exc:
        raise BackfillError(f"{where}: reading {list(paths)}: {type(exc).__name__}: {exc}") from exc
    types = dict(df.dtypes)
    for required in ("time", "diff"):
        if required not in types:
            raise BackfillError(f"{where}: the archive has no {required!r} column (columns: {list(types)})")
        if types[required] not in _ACCEPTED["int"][0]:
            raise BackfillError(f"{where}: column {required!r} is {types[required]}, not an integer type")
    if fields is None:
        names = [c for c in df.columns if c not in ("time", "diff")]
        declared = dict.fromkeys(names, "any")
        columns: tuple[Column, ...] = columns_for_fields(None)
    else:
        declared = dict(fields) if isinstance(fields, Mapping) else dict.fromkeys(fields, "any")
        columns = columns_for_fields(declared)
    missing = [n for n in declared if n not in types]
    if missing:
        raise BackfillError(f"{where}: the archive has no column {missing[0]!r} for the field of that name "
                            f"(columns: {list(types)})")
    selected = []
    for i, (field, kind) in enumerate(declared.items()):
        spark_type = types[field]
        if kind == "any":
            if spark_type not in _ANY:
                raise BackfillError(f"{where}: column {field!r} is {spark_type}, which a record field cannot hold "
                                    f"(use bigint, double, string, binary or boolean)")
            target = _ANY[spark_type]
        else:
            accepted, target = _ACCEPTED[kind]
            if spark_type not in accepted:
                raise BackfillError(f"{where}: column {field!r} is {spark_type}, but the field is declared {kind} "
                                    f"(accepted: {', '.join(sorted(accepted))})")
        selected.append(F.col(f"`{field}`").cast(target).alias(f"v{i}"))
    df = df.select(*selected, F.col("time").cast("bigint").alias("time"), F.col("diff").cast("bigint").alias("diff"))
    return Archive(df, columns, declared)


def check_archive(archive: Archive, name: str, paths: int, progress: Progress) -> dict[str, Any]:
    """One pass over input ``name``'s archive (read from ``paths`` paths): its row count
    (``rows``) and largest time (``max_time``, None when empty); `BackfillError` on a null where
    the column's type allows none."""
    from pyspark.sql import functions as F

    df, declared = archive.df, archive.declared
    nullable = {f"v{i}" for i, kind in enumerate(declared.values()) if kind == "any"}
    checked = [c for c in df.columns if c not in nullable]
    aggregates = [F.count(F.lit(1)).alias("rows"), F.max("time").alias("max_time"), F.min("time").alias("min_time")]
    aggregates += [F.sum(F.col(c).isNull().cast("long")).alias(f"null_{c}") for c in checked]
    progress(f"backfill: input {name!r}: checking {paths} archive path(s)")
    row = df.agg(*aggregates).collect()[0]
    names = list(declared) + ["time", "diff"]
    for c in checked:
        nulls = row[f"null_{c}"] or 0
        if nulls:
            column = names[int(c[1:])] if c.startswith("v") else c
            raise BackfillError(f"backfill input {name!r}: {nulls} rows have a null {column!r}, which its type "
                                "does not allow (only 'any' fields may be null)")
    progress(f"backfill: input {name!r}: {row['rows']} updates, times {row['min_time']}..{row['max_time']}")
    return {"rows": row["rows"], "max_time": row["max_time"]}
