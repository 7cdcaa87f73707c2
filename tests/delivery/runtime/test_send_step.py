"""The send step's work rows: one Arrow schema, the Spark side derived from it."""

from __future__ import annotations

from wayline.delivery.runtime.work_rows import WORK_ARROW_SCHEMA
from wayline.pipelines.sending import SEND_SCHEMA, WORK_SCHEMA


def test_the_spark_schema_of_work_rows_is_derived_from_the_arrow_one() -> None:
    # The columns the routing query and the batching query produce, by name and type.
    assert WORK_SCHEMA == (
        "kind string, subscription_id string, endpoint_id string, event_ids array<string>, body binary, "
        "topic string, key binary, headers array<struct<key:string,value:binary>>, reason string, events int, "
        "source string"
    )
    assert SEND_SCHEMA == "kind string, subscription_id string, endpoint_id string, event_ids array<string>, body binary"
    assert WORK_ARROW_SCHEMA.names == [part.split(" ")[0] for part in WORK_SCHEMA.split(", ")]
