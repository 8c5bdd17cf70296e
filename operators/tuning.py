"""The engine's tuning knobs, in one object a dataflow is built with.

``Dataflow(config=EngineConfig(...))`` fixes them for every node, trace and memo of that dataflow;
nothing in the engine reads a module global that a caller could patch. None of them changes a
result: they trade memory against speed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import ConfigurationError

EXECUTORS = ("nodes", "plan")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Tuning knobs of one dataflow (positive ints, and the executor's name).

    * ``merge_fuel_per_update``: merge work a trace does per inserted update; with geometric
      merging any value of at least 2 keeps the number of batches logarithmic.
    * ``merge_min_fuel``: the least merge work done per insert (small inserts still make progress).
    * ``memo_limit``: codes a memo holds before it starts afresh (memos are caches; this bounds them
      on ever-new records).
    * ``reduce_chunk_keys``: keys a reduction evaluates together (bounds its transient memory).
    * ``reduce_history_rows``: rows a reduction keeps of its recent keys' histories between rounds
      (beyond it, it forgets them all and looks keys up again).
    * ``reduce_history_keys``: keys of a round from which a reduction starts keeping histories (a
      lookup of fewer costs about what keeping them would).
    * ``round_merge_updates``: updates a join or reduction takes in one loop round from which it lets
      its traces merge the epoch's round batches during the epoch (it allows them the round's
      frontier physically). Smaller rounds leave those batches apart until the epoch ends, when the
      idle merge joins them: merging small rounds as they come costs more than looking them up.
    * ``user_chunk``: records or groups handed to user Python functions per bulk call (bounds the
      Python objects alive at once).
    * ``sweep_growth``, ``sweep_min_ids``: at the end of ``run()``, ids no state holds any more are
      given back once the ids in use number ``sweep_growth`` times those alive after the last sweep,
      and at least ``sweep_min_ids`` (1 and 1: after every run).
    * ``executor``: what runs an epoch, ``"plan"`` (the default: the graph lowered to a plan at the
      first run; see :mod:`ddflow.operators.executor`) or ``"nodes"`` (the reference the plan
      executor is tested against: each scope walks its node objects). Both compute the same
      outputs.
    """

    merge_fuel_per_update: int = 4
    merge_min_fuel: int = 1024
    memo_limit: int = 1 << 20
    reduce_chunk_keys: int = 1 << 18
    reduce_history_rows: int = 1 << 20
    reduce_history_keys: int = 256
    round_merge_updates: int = 1 << 16
    user_chunk: int = 1 << 18
    sweep_growth: int = 2
    sweep_min_ids: int = 1 << 16
    executor: str = "plan"

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigurationError(f"EngineConfig.executor must be one of {', '.join(map(repr, EXECUTORS))}, "
                                     f"got {self.executor!r}")
        for f in fields(self):
            if f.name == "executor":
                continue
            value = getattr(self, f.name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"EngineConfig.{f.name} must be a positive int, got {value!r}")


DEFAULT = EngineConfig()
