"""What Spark's code generation did in a bench's JVM."""

from __future__ import annotations

from typing import Any


def compilations(spark: Any) -> int:
    """Generated classes Janino has compiled in this JVM so far: a class whose source is
    already in Spark's code cache is not compiled again, so a query whose generated code
    is the same in every batch compiles only in its first."""
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()
