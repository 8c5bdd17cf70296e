"""The one stable key hash: pinned values, the same in every process, equal for equal values,
the column implementations equal to the scalar one, and keys spread over partitions."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from ddflow.operators import ShapeError
from ddflow.operators.partition import (
    combine,
    element_hash,
    finish,
    int_elements,
    key_hash,
    partition_of,
    record_key,
)

# A change to any of these moves keys between workers, checkpoint shards and topic partitions:
# persisted data would no longer be where the hash says (snapshots record the hash's name).
PINNED = {
    0: 469874208863542616,
    1: 2579157581981172913,
    -1: 8078679518589016365,
    2**70: 6011568359958228336,
    -(2**63): 1639098137589306626,
    "a": 7174803275820797127,
    b"a": 7534399557753853467,
    None: 1938207688387663958,
    1.5: 1701133413810848945,
    (1, 2): 8019613132748029535,
    (1, "x"): 1098777466326340676,
    ((1, 2), 3): 9001259404014884146,
    ("a", (None, b"z")): 5251000187899017546,
    frozenset({1, 2}): 2210788964021493032,
}


def test_pinned_values():
    assert {v: key_hash(v) for v in PINNED} == PINNED


def test_the_same_in_every_process():
    values = list(PINNED) + ["ünïcode", ("page", 17), (0, "abc")]
    code = ("from ddflow.operators.partition import key_hash; "
            f"print([key_hash(v) for v in {values!r}])")
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("0", "1", "random")
    }
    assert outs == {f"{[key_hash(v) for v in values]}\n"}


def test_equal_values_hash_equally_and_stay_in_63_bits():
    assert key_hash(1) == key_hash(True) == key_hash(1.0)
    assert key_hash((1, 2)) == key_hash((1.0, True + 1))
    assert key_hash(0) == key_hash(-0.0) == key_hash(False)
    assert key_hash(float(2**70)) == key_hash(2**70)
    assert key_hash(float("nan")) == key_hash(float("nan"))
    assert key_hash("a") != key_hash(b"a")
    for v in list(PINNED) + [2**63 - 1, float("inf"), (), ("",)]:
        assert 0 <= key_hash(v) < 2**63


def test_records_are_placed_by_their_first_field():
    assert record_key((5, "x")) == 5 and record_key("page") == "page" and record_key(()) == ()
    assert partition_of((5, "x"), 7) == partition_of((5, "y"), 7) == key_hash(5) % 7


def test_values_without_a_stable_hash_are_refused():
    class Point:
        pass

    with pytest.raises(ShapeError, match="Point value .* has no stable key hash"):
        key_hash(Point())
    with pytest.raises(ShapeError, match="no stable key hash"):
        key_hash((1, Point()))


def test_columns_compute_the_scalar_hash():
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64, endpoint=True),
                        np.array([0, 1, -1, -2, 2**61 - 1, 2**61, -(2**61), -(2**63), 2**63 - 1], dtype=np.int64)])
    b = rng.permutation(a)
    ea, eb = int_elements(a), int_elements(b)
    assert ea.tolist() == [element_hash(int(x)) for x in a]
    assert finish(ea).tolist() == [key_hash(int(x)) for x in a]
    assert finish(combine(ea, eb)).tolist() == [key_hash((int(x), int(y))) for x, y in zip(a, b)]
    nested = combine(combine(ea, eb), np.full(len(a), element_hash("s")))
    assert finish(nested).tolist() == [key_hash(((int(x), int(y)), "s")) for x, y in zip(a, b)]


@pytest.mark.parametrize("stride", [1, 2, 3, 4, 1000])
def test_keys_sharing_a_residue_spread_over_partitions(stride):
    counts = Counter(partition_of(stride * i, 4) for i in range(8000))
    assert len(counts) == 4 and min(counts.values()) > 1800
