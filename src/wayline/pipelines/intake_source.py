"""The intake topic read as the source topics it copies (``delivery.intake = "on"``).

An intake process (:mod:`wayline.delivery.runtime.intake`) appends the record's origin
as its last three headers (:data:`~wayline.delivery.runtime.intake.ORIGIN_HEADERS`) and
keeps its timestamp. One projection, in the JVM, puts the origin back in the Kafka
columns and takes those headers off, so that everything after it (the parse, audit
records' topic/partition/offset, quarantine copies, a request's ``source``) is as if the
record had been read from its own topic.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from wayline.delivery.runtime.intake import ORIGIN_HEADERS


def _origin(headers: Column, name: str) -> Column:
    # By position, not by name: the intake appends them last, and a producer's own header
    # of the same name (forged or not) stays the record's.
    return F.element_at(headers, ORIGIN_HEADERS.index(name) - len(ORIGIN_HEADERS))["value"].cast("string")


def from_origin(intake: DataFrame) -> DataFrame:
    """``intake`` (the Kafka source's columns, read with headers) with ``topic``,
    ``partition``, ``offset`` and ``headers`` those of the original record."""
    headers = F.col("headers")
    own = F.size(headers) - len(ORIGIN_HEADERS)
    topic, partition, offset = ORIGIN_HEADERS
    return intake.withColumns({
        "topic": _origin(headers, topic),
        "partition": _origin(headers, partition).cast("int"),
        "offset": _origin(headers, offset).cast("long"),
        # A record without headers of its own reads as one from a topic: no array at all.
        "headers": F.when(own > 0, F.slice(headers, F.lit(1), own)),
    })


__all__ = ["from_origin"]
