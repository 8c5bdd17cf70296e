"""Compile the msgpack codec's kernels ahead of time: ``python -m ddflow.daemon.formats.kernels.warm``.

Decodes one input batch and encodes one result update (one field of each kind), so that both
kernels are compiled for the types the daemon calls them with and written to numba's on-disk cache
(``NUMBA_CACHE_DIR`` when set). Exits 1 naming any kernel it did not compile. The engine's kernels
have their own warm-up (`ddflow.operators.kernels.warm`).
"""

from __future__ import annotations

import sys

import numpy as np

from . import KERNELS

# the argument types of each kernel, as ``ddflow.operators.kernels.precompile.SIGNATURES`` lists the engine's
SIGNATURES: dict[str, tuple[str, ...]] = {
    "unpack.unpack_batch": ("uint8[1Cr], int64[1C]",),
    "pack.pack_updates": ("int64[2C], int64[1C], bool, int64[1C], int64[1C], uint8[1C]",),
}


def edge_cases() -> None:
    """One call of each kernel: a batch with an int, a float and a bool field, both ways."""
    from .pack import max_packed_size, pack_updates
    from .unpack import unpack_batch

    # msgpack batches into columns (the daemon's inputs): [[[1, 2.5, true], 3, 1]]
    unpack_batch(np.frombuffer(b"\x91\x93\x93\x01\xcb\x40\x04\x00\x00\x00\x00\x00\x00\xc3\x03\x01",
                               dtype=np.uint8), np.array([0, 1, 2], dtype=np.int64))
    # columns into msgpack updates (the daemon's outputs): [[1, 2.5, true], 3, 1]
    pack_updates(np.array([[1, np.float64(2.5).view(np.int64), 1]], dtype=np.int64), np.array([0, 1, 2], dtype=np.int64),
                 False, np.array([3], dtype=np.int64), np.array([1], dtype=np.int64),
                 np.empty(max_packed_size(1, 3), dtype=np.uint8))


def main() -> int:
    edge_cases()
    missing = sorted(name for name, k in KERNELS.items() if not k.signatures)
    print(f"{len(KERNELS) - len(missing)} of {len(KERNELS)} codec kernels compiled or loaded")
    if missing:
        print(f"not exercised by the warm-up: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
