"""The rules benchmarks' stream and rules: ``bench/rules.py`` runs the job over them,
``bench/rules_state.py`` one stateful group of it in plain Python.

The stream: CloudEvents spread over one hour of simulated event time, each for one of
``USERS`` users (``data.user``) with a price and an amount, of the types in ``KINDS``. The
rule mixes: filters/projections, one-minute window aggregations per user (HAVING), and
MATCH_RECOGNIZE patterns per user (WITHIN 5 minutes), in the proportions of ``MIXES``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
USERS = 100_000
KINDS = ("bench.order", "bench.order", "bench.price", "bench.login.failed", "bench.login.ok")


def stream(count: int, seed: int = 7, start: datetime = T0) -> Iterator[dict[str, Any]]:
    """``count`` events in order, over the hour from ``start`` (``time`` a datetime)."""
    rng = random.Random(seed)
    for n in range(count):
        user = f"u{rng.randrange(USERS)}"
        kind = rng.choice(KINDS)
        yield {
            "specversion": "1.0", "id": f"e{n}", "source": "bench", "type": kind, "tenantid": f"t{rng.randrange(100)}",
            "time": start + timedelta(seconds=3600 * n / count),
            "data": {"user": user, "price": rng.randrange(100), "amount": rng.randrange(1000)},
        }


def filters(count: int) -> list[str]:
    out = []
    for i in range(count):
        if i % 2:
            out.append(f"SELECT id, data.user AS user, data.amount AS amount FROM events "
                       f"WHERE type = 'bench.order' AND data.amount > {900 + i}")
        else:
            out.append(f"SELECT id, tenantid FROM events WHERE type = 'bench.price' AND data.price < {i % 7}")
    return out


def windows(count: int) -> list[str]:
    return [f"SELECT data.user, window.start AS start, COUNT(*) AS n, SUM(data.amount) AS total FROM events "
            f"WHERE type = 'bench.order' GROUP BY data.user, window(event_time, '1 minute') "
            f"HAVING SUM(data.amount) > {1500 + i}" for i in range(count)]


PATTERNS = [
    """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY data.user ORDER BY event_time
       MEASURES COUNT(F.*) AS failures PATTERN (F{{3,}} S) WITHIN INTERVAL '5' MINUTE
       DEFINE F AS F.type = 'bench.login.failed', S AS S.type = 'bench.login.ok' AND {i} >= 0)""",
    """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY data.user ORDER BY event_time
       MEASURES FIRST(A.data.price) AS top, LAST(C.data.price) AS back PATTERN (A B+ C)
       WITHIN INTERVAL '5' MINUTE
       DEFINE A AS A.type = 'bench.price', B AS B.type = 'bench.price' AND B.data.price < PREV(B.data.price) - {i},
              C AS C.type = 'bench.price' AND C.data.price > PREV(C.data.price))""",
]


def patterns(count: int) -> list[str]:
    return [PATTERNS[i % len(PATTERNS)].format(i=i) for i in range(count)]


# Each configuration's (filters, windows, patterns).
MIXES = {
    "baseline (no rules)": (0, 0, 0),
    "1 filter": (1, 0, 0),
    "1 pattern": (0, 0, 1),
    "10 rules (7/2/1)": (7, 2, 1),
    "100 rules (70/20/10)": (70, 20, 10),
    "1,000 rules (700/200/100)": (700, 200, 100),
}
CONFIGS = {name: filters(f) + windows(w) + patterns(p) for name, (f, w, p) in MIXES.items()}
