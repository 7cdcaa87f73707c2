"""The routing table the delivery job publishes for ``wayline_routes``: its document and its folder."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import orjson

from wayline.delivery.routing_table import CURRENT, KEPT_VERSIONS, publish, routing_document
from wayline.registry.filter import parse_filter
from wayline.registry.snapshot import ANY, CompiledSubscription, Snapshot

AMOUNT = parse_filter({"data.amount": {"$gte": 100}, "time": {"$lt": "2025-01-31T13:00:00.000001+01:00"}})
SNAPSHOT = Snapshot(
    version=3, built_at=datetime.now(timezone.utc), endpoints={},
    subscriptions={
        "sub_b": CompiledSubscription("sub_b", "ep_2", "c", "batch", 10, None, AMOUNT, 1),
        "sub_a": CompiledSubscription("sub_a", "ep_1", "c", "streaming", None, None, None, None),
    },
    index={("order.paid", "t1", ANY): ("sub_b", "sub_a"), ("order.paid", ANY, ANY): ("sub_a",)},
    filters={1: AMOUNT},
)


def test_the_document_lists_routes_with_their_defaults_and_keys_by_position() -> None:
    document = routing_document(SNAPSHOT)
    assert document["version"] == 3
    assert document["subscriptions"] == [
        {"id": "sub_a", "endpoint_id": "ep_1", "mode": "streaming", "max_count": 1000, "max_wait_ms": 1000,
         "filter": None},
        {"id": "sub_b", "endpoint_id": "ep_2", "mode": "batch", "max_count": 10, "max_wait_ms": 1000, "filter": 1},
    ]
    # Each key's subscriptions by id, as positions in the list above.
    assert document["keys"] == [["order.paid", "*", "*", [0]], ["order.paid", "t1", "*", [0, 1]]]


def test_a_filter_travels_as_its_syntax_tree_with_times_in_microseconds() -> None:
    assert routing_document(SNAPSHOT)["filters"] == {"1": {"and": [
        {"compare": "$gte", "path": {"field": "data", "steps": ["amount"]}, "value": {"kind": "number", "raw": 100.0}},
        {"compare": "$lt", "path": {"field": "time", "steps": []},
         "value": {"kind": "time", "raw": 1_738_324_800_000_001}},
    ]}}


def test_current_names_the_newest_table_and_only_the_newest_are_kept(tmp_path) -> None:
    for version in range(1, KEPT_VERSIONS + 4):
        publish(tmp_path, replace(SNAPSHOT, version=version))
    newest = KEPT_VERSIONS + 3
    assert (tmp_path / CURRENT).read_text() == str(newest)
    assert orjson.loads((tmp_path / f"v{newest}.json").read_bytes()) == routing_document(
        replace(SNAPSHOT, version=newest))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [CURRENT, *(f"v{v}.json" for v in range(newest - KEPT_VERSIONS + 1, newest + 1))])
