"""Small builders for the rule tests: timed rows and a one-call way to run a rule over them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from wayline.rules import Match, PartitionMatcher, parse_match_recognize, parse_pattern
from wayline.rules.pattern import variables

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def timed(values: Iterable[dict[str, Any]], step: float = 1.0) -> list[dict[str, Any]]:
    """Rows ``step`` seconds apart, each with its time in column ``t``."""
    return [{"t": at(index * step), **value} for index, value in enumerate(values)]


def kinds(text: str) -> list[dict[str, Any]]:
    """One row per letter, in column ``kind``: ``kinds("abx")``."""
    return timed({"kind": letter} for letter in text)


def prices(*values: float) -> list[dict[str, Any]]:
    return timed({"price": value} for value in values)


def by_kind(pattern: str) -> str:
    """DEFINE each variable of ``pattern`` as the rows of its kind: ``A AS kind = 'a', ...``."""
    return ", ".join(f"{name} AS kind = '{name.lower()}'" for name in variables(parse_pattern(pattern)))


def run(sql: str, rows: Sequence[dict[str, Any]]) -> list[Match]:
    """All matches of a rule over rows given in one batch, the input then ending."""
    matcher = PartitionMatcher(parse_match_recognize(sql))
    return matcher.feed(rows) + matcher.finish()


def json_round_trip(state: dict[str, Any]) -> dict[str, Any]:
    """Through JSON, as a state store would keep it (times inside rows as ISO text and back)."""
    text = json.dumps(state, default=lambda value: {"$time": value.isoformat()})
    return json.loads(text, object_hook=lambda d: datetime.fromisoformat(d["$time"]) if "$time" in d else d)


def spans(matches: Sequence[Match]) -> list[tuple[int, str]]:
    """Each match as (first row, its variables joined): ``(0, "A B B C")``."""
    return [(match.start, " ".join(match.labels)) for match in matches]


def rule(pattern: str, define: str, *, measures: str = "", skip: str = "", within: str = "") -> str:
    """A MATCH_RECOGNIZE rule over ``events`` ordered by ``t``."""
    return f"""
        SELECT * FROM events MATCH_RECOGNIZE (
          ORDER BY t
          {'MEASURES ' + measures if measures else ''}
          ONE ROW PER MATCH
          {'AFTER MATCH SKIP ' + skip if skip else ''}
          PATTERN ({pattern})
          {'WITHIN ' + within if within else ''}
          DEFINE {define}
        ) AS m
    """
