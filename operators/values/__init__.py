"""Values: records interned to int64 ids and given back when no state holds them.

``ids`` (the id layout, its kinds, limit and free list), ``interner`` (values <-> ids), ``sweep``
(reclaiming ids at the end of a run), ``keytable`` and ``memo`` (dense numbering of codes and
remembered results of user functions), ``ordering`` (the Python order of values). The record
builders of joins and maps, which use them, are :mod:`ddflow.operators.nodes.records`.
"""
