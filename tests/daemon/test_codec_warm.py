"""The msgpack codec's warm-up compiles both of its kernels (the container image runs it at build time)."""

from __future__ import annotations

from ddflow.daemon.formats import kernels
from ddflow.daemon.formats.kernels import warm


def test_the_codec_warm_up_compiles_every_codec_kernel(capsys) -> None:
    assert warm.main() == 0
    assert sorted(kernels.KERNELS) == ["pack.pack_updates", "unpack.unpack_batch"]
    assert all(k.signatures for k in kernels.KERNELS.values())
    assert "2 of 2 codec kernels" in capsys.readouterr().out
