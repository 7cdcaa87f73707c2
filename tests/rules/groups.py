"""Builders for the tests of one stateful group of rules: rules as the job runs them, and
rows keyed by partition key, with a few rules of each kind."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import orjson

from tests.rules.streams import T0
from wayline.rules.engine import ActiveRule
from wayline.rules.rule import compile_rule

V_SHAPE = """SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY tenantid ORDER BY event_time
  MEASURES FIRST(A.data.price) AS top, LAST(B.data.price) AS bottom
  PATTERN (A B+ C) WITHIN INTERVAL '5' MINUTE
  DEFINE B AS B.data.price < PREV(B.data.price), C AS C.data.price > PREV(C.data.price))"""
PER_MINUTE = """SELECT tenantid, window.start AS start, window.end AS end, COUNT(*) AS n, AVG(data.price) AS mean
  FROM events WHERE data.price > 0 GROUP BY tenantid, window(event_time, '1 minute') HAVING COUNT(*) >= 2"""
SLIDING = """SELECT tenantid, COUNT(*) AS n, MAX(data.price) AS high
  FROM events GROUP BY tenantid, sliding_window(event_time, '1 minute') HAVING COUNT(*) >= 3"""
SESSION = """SELECT tenantid, window.start AS start, COUNT(*) AS n
  FROM events GROUP BY tenantid, session_window(event_time, '20 seconds')"""

_ids = itertools.count()


def rule(sql: str, name: str, *, state_budget: int = 10_000, time_budget_ms: int = 10_000, revision: int = 1) -> ActiveRule:
    return ActiveRule(f"rule_{name}", revision, name, compile_rule(sql), f"out.{name}", f"alert.{name}",
                      state_budget, time_budget_ms)


def rows(tenant: str, *prices: float, start: float = 0, step: float = 10) -> list[tuple[str, dict[str, Any]]]:
    return [(orjson.dumps([tenant]).decode(), {
        "id": f"e{next(_ids)}", "type": "price", "tenantid": tenant,
        "event_time": T0 + timedelta(seconds=start + index * step), "data": {"price": price},
    }) for index, price in enumerate(prices)]


__all__ = ["PER_MINUTE", "SESSION", "SLIDING", "V_SHAPE", "rows", "rule"]
