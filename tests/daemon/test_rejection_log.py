"""Dead letters in the log: a WARNING per reason when first seen, then at most one count per reason
per interval (on a clock moved by hand), the first unsaid message named; nothing left unsaid at close."""

from __future__ import annotations

import logging

from ddflow.daemon.observe.rejections import RejectionLog


def test_first_of_each_reason_at_once_then_counts_per_interval(caplog):
    now = [0.0]
    said = RejectionLog("dlq", interval=60.0, clock=lambda: now[0])

    def bad(offset: int, *reasons: str) -> None:
        said.record(input="a", topic="in", partition=offset % 2, offset=offset,
                    counts={r: 1 for r in reasons}, details={r: f"{r} at {offset}" for r in reasons})

    with caplog.at_level(logging.WARNING, logger="ddflow.daemon.deadletters"):
        bad(0, "zero_diff")
        bad(1, "zero_diff", "arity")
        for offset in range(2, 1002):
            now[0] += 0.01
            bad(offset, "zero_diff")
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            "dead letter (zero_diff): input 'a' in[0] offset 0: zero_diff at 0; written to 'dlq' (further ones are "
            "counted each 60 s)",
            "dead letter (arity): input 'a' in[1] offset 1: arity at 1; written to 'dlq' (further ones are counted "
            "each 60 s)"]
        now[0] = 60.0
        said.tick()  # the interval of zero_diff passed: its count, naming the first of them
        assert caplog.records[-1].getMessage() == (
            "dead letters (zero_diff): 1001 more messages in the last 60 s, the first input 'a' in[1] offset 1: "
            "zero_diff at 1")
        said.tick()
        bad(2000, "zero_diff")  # within the new interval: counted, not said
        assert len(caplog.records) == 3
        said.close()
        assert len(caplog.records) == 4 and "1 more messages" in caplog.records[-1].getMessage()
        assert all(r.levelno == logging.WARNING for r in caplog.records)
