"""Counting the records an operator hands to user Python."""

from __future__ import annotations


def records_called(monkeypatch, cls: type, method: str) -> list[int]:
    """Patch ``cls.method(self, ids)`` (the method that calls a user function on the records ``ids``)
    to count them: the returned one-element list holds the count so far."""
    calls = [0]
    original = getattr(cls, method)

    def counted(self, ids):
        calls[0] += len(ids)
        return original(self, ids)

    monkeypatch.setattr(cls, method, counted)
    return calls
