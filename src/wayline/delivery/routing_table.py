"""The registry snapshot as the JVM routes with it: a routing table the delivery job publishes.

The matching query routes each event in Spark's executors with ``wayline_routes``
(``jvm/src/main/java/dev/wayline/routing``, :mod:`wayline.pipelines.matching`), which reads
its routes from a folder rather than from its plan: a new registry version is a new file,
not a new query, so a real-time batch can run for minutes and still follow the registry.

The folder holds ``v<version>.json``, each written once (to a temporary name, then renamed),
and ``CURRENT``, the version to route with now, replaced the same way after its table is
in place. A reader that finds ``CURRENT`` finds its table whole. Every executor must see the
folder at the same path: a local master does; on a cluster it lives where the checkpoints
do, on a file system the executors share.

The document (JSON):

- ``version``: the registry version;
- ``subscriptions``: per subscription its route (``id``, ``endpoint_id``, ``mode``,
  ``max_count``, ``max_wait_ms``, the defaults filled in) and ``filter``, a key of ``filters``
  or null;
- ``filters``: each distinct filter's syntax tree (:func:`filter_node`);
- ``keys``: ``[event type, tenant or "*", sub-tenant or "*", [subscription positions]]``,
  each key's subscriptions by id, as :meth:`Snapshot.match_keys` lists them.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from wayline.delivery.batch import DEFAULT_MAX_COUNT, DEFAULT_MAX_WAIT
from wayline.registry.filter import Affix, And, Compare, Exists, Filter, In, Not, Or, Value
from wayline.registry.filter import Path as FilterPath

if TYPE_CHECKING:  # its module reads the registry through SQLAlchemy, which the delivery core never loads
    from wayline.registry.snapshot import Snapshot

CURRENT = "CURRENT"
KEPT_VERSIONS = 10
"""Tables kept in the folder, the newest: a micro-batch planned with a version reads its table
until it ends, while newer versions come in."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def routing_document(snapshot: Snapshot) -> dict[str, Any]:
    """``snapshot``'s routing table (the module's format)."""
    default_wait_ms = round(DEFAULT_MAX_WAIT.total_seconds() * 1000)
    ordered = sorted(snapshot.subscriptions.values(), key=lambda s: s.id)
    position = {s.id: n for n, s in enumerate(ordered)}
    keys: dict[tuple[str, str, str], list[str]] = {}
    for event_type, tenant_key, subtenant_key, subscription_id, _ in snapshot.match_keys():
        keys.setdefault((event_type, tenant_key, subtenant_key), []).append(subscription_id)
    return {
        "version": snapshot.version,
        "subscriptions": [
            {"id": s.id, "endpoint_id": s.endpoint_id, "mode": s.mode, "max_count": s.max_count or DEFAULT_MAX_COUNT,
             "max_wait_ms": s.max_wait_ms or default_wait_ms, "filter": s.filter_id}
            for s in ordered
        ],
        "filters": {str(number): filter_node(compiled) for number, compiled in snapshot.filters.items()},
        "keys": [[*key, [position[s] for s in sorted(ids)]] for key, ids in sorted(keys.items())],
    }


def filter_node(filter: Filter) -> dict[str, Any]:
    """A filter's syntax tree as the JVM reads it (``Filter.read`` there)."""
    match filter:
        case And(items):
            return {"and": [filter_node(item) for item in items]}
        case Or(items):
            return {"or": [filter_node(item) for item in items]}
        case Not(item):
            return {"not": filter_node(item)}
        case Exists(path):
            return {"exists": _path(path)}
        case Compare(path, op, value):
            return {"compare": op, "path": _path(path), "value": _value(value)}
        case In(path, values):
            return {"in": _path(path), "values": [_value(value) for value in values]}
        case Affix(path, op, text):
            return {"affix": op, "path": _path(path), "text": text}
    raise TypeError(f"not a filter: {filter!r}")


def _path(path: FilterPath) -> dict[str, Any]:
    return {"field": path.field, "steps": list(path.steps)}


def _value(value: Value) -> dict[str, Any]:
    if isinstance(value.raw, datetime):
        return {"kind": value.kind, "raw": (value.raw - _EPOCH) // _MICROSECOND}
    return {"kind": value.kind, "raw": value.raw}


def publish(folder: Path, snapshot: Snapshot) -> None:
    """Make ``snapshot``'s table the one ``folder``'s readers route with."""
    folder.mkdir(parents=True, exist_ok=True)
    _replace(folder / f"v{snapshot.version}.json", orjson.dumps(routing_document(snapshot)))
    _replace(folder / CURRENT, str(snapshot.version).encode())
    tables = sorted(folder.glob("v*.json"), key=lambda table: int(table.stem[1:]), reverse=True)
    for old in tables[KEPT_VERSIONS:]:
        old.unlink(missing_ok=True)


def _replace(path: Path, content: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(content)
    temporary.replace(path)


__all__ = ["CURRENT", "KEPT_VERSIONS", "filter_node", "publish", "routing_document"]
