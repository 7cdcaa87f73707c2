"""Fixed windows in Python (``WindowState``): what the compiled spec folds and emits."""

from __future__ import annotations

from datetime import datetime, timezone

from wayline.rules.rule import compile_rule
from wayline.rules.window import WindowState


def test_an_aggregate_only_having_uses_is_folded_too() -> None:
    # HAVING's COUNT(*) appears nowhere else: it was left out of the folded aggregates, and
    # the window never passed HAVING.
    spec = compile_rule("SELECT data.user, SUM(data.amount) AS total FROM events "
                        "GROUP BY data.user, window(event_time, '1 minute') HAVING COUNT(*) = 1").window
    assert spec is not None
    windows = WindowState(spec)
    windows.add([{"event_time": datetime(2026, 3, 1, 9, 0, 5, tzinfo=timezone.utc), "data": {"amount": 3}}], None)
    closed = windows.close(10**18, {"data": {"user": "u1"}})
    assert [(row.data, row.end - row.start) for row in closed] == [({"user": "u1", "total": 3}, 60_000_000)]
