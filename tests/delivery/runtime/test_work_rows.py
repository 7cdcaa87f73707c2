"""Work rows in Arrow, as a Spark sending task gets them, read as the send step's work."""

from __future__ import annotations

import pyarrow as pa

from wayline.core.kafka import KafkaRecord
from wayline.delivery.attempt import Kind
from wayline.delivery.runtime.send_step import WorkRequest
from wayline.delivery.runtime.work_rows import WORK_ARROW_SCHEMA, work_of


def test_rows_of_each_kind_become_requests_records_and_counts() -> None:
    rows = [
        {"kind": "single", "subscription_id": "sub_1", "endpoint_id": "ep_1", "event_ids": ["e1"], "body": b"1",
         "events": 1, "source": "events.orders"},
        {"kind": "filtered", "events": 1},
        {"kind": "record", "topic": "wayline.quarantine", "key": b"k", "body": b"bad", "reason": "oversize",
         "headers": [{"key": "h", "value": b"v"}]},
        {"kind": "record", "topic": "wayline.batches", "key": b"sub_2", "body": b"bundle", "event_ids": ["e2", "e3"],
         "events": 2},
        {"kind": "batch", "subscription_id": "sub_2", "endpoint_id": "ep_2", "event_ids": ["e4", "e5"], "body": b"[]"},
    ]
    empty = pa.RecordBatch.from_pylist([], schema=WORK_ARROW_SCHEMA)
    work = work_of([empty, pa.RecordBatch.from_pylist(rows, schema=WORK_ARROW_SCHEMA)])
    assert work.requests == [WorkRequest(Kind.SINGLE, "sub_1", "ep_1", ["e1"], b"1", "events.orders"),
                             WorkRequest(Kind.BATCH, "sub_2", "ep_2", ["e4", "e5"], b"[]")]
    assert work.records == [KafkaRecord("wayline.quarantine", b"k", b"bad", [("h", b"v")]),
                            KafkaRecord("wayline.batches", b"sub_2", b"bundle", [])]
    counts = work.counts
    assert (counts.events, counts.filtered, counts.held, counts.quarantined) == (4, 1, 2, {"oversize": 1})
