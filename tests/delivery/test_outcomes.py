"""Tallies: every delivery ends in one outcome, and tallies survive the trip to the driver."""

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from wayline.delivery.attempt import Pending, settle
from wayline.delivery.outcomes import LATENCY_BUCKETS_S, BatchSummary, Outcome, Tally, failure_reason
from wayline.delivery.retry import RetryPolicy
from wayline.delivery.transports.base import Failure, FailureKind, Response

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pending(event_id: str, subscription_id: str = "sub_1", endpoint_id: str = "ep_1") -> Pending:
    return Pending.single(event_id, b"{}", subscription_id=subscription_id, endpoint_id=endpoint_id, now=NOW)


def answer(status: int, elapsed_s: float = 0.02) -> Response:
    return Response(status, {}, b"", elapsed_s)


def test_each_state_counts_as_its_outcome_with_its_failure_reason_and_latency() -> None:
    tally = Tally()
    rng = random.Random(1)
    tally.settled(settle(pending("e1"), answer(200, 0.003), NOW, rng))
    tally.settled(settle(pending("e2"), answer(503, 0.2), NOW, rng))
    tally.settled(settle(pending("e3"), Failure(FailureKind.DEADLINE, "cut", 5.0), NOW, rng))
    tally.settled(settle(pending("e4"), answer(400), NOW, rng))
    tally.settled(settle(pending("e5", "sub_2"), answer(410), NOW, rng))
    tally.settled(settle(pending("e6"), answer(503), NOW, rng, RetryPolicy(schedule=(timedelta(0),))))
    tally.skipped(pending("e7"))

    pairs = dict(tally.items())
    first, gone = pairs[("ep_1", "sub_1")], pairs[("ep_1", "sub_2")]
    assert first.outcomes == Counter({Outcome.DELIVERED: 1, Outcome.RETRIED: 2, Outcome.DEAD_LETTERED: 2,
                                      Outcome.SKIPPED: 1})
    assert first.failures == Counter({"http_503": 2, "deadline": 1, "http_400": 1})
    assert (gone.outcomes, gone.gone) == (Counter({Outcome.DEAD_LETTERED: 1}), 1)
    assert tally.gone_subscriptions() == {"sub_2"}
    # Answers only: the deadline cut says nothing about the endpoint's speed.
    assert sum(first.latency_buckets) == 4
    assert first.latency_buckets[0] == 1 and first.latency_buckets[LATENCY_BUCKETS_S.index(0.25)] == 1
    assert first.latency_sum_s == 0.003 + 0.2 + 0.02 + 0.02


def test_a_tally_travels_as_rows_and_sums_on_the_way() -> None:
    tally = Tally()
    rng = random.Random(1)
    for n in range(3):
        tally.settled(settle(pending(f"e{n}", endpoint_id=f"ep_{n % 2}"), answer(200 if n else 502), NOW, rng))
    rows = tally.rows()
    # The driver gets maps back as dicts, and the same pair from several tasks.
    as_collected = [row | {"failures": dict(row["failures"])} for row in rows]
    doubled = Tally.from_rows(as_collected + rows)
    assert doubled.total(Outcome.DELIVERED) == 2 * tally.total(Outcome.DELIVERED) == 4
    assert dict(doubled.items())[("ep_0", "sub_1")].failures == Counter({"http_502": 2})
    assert Tally.from_rows(rows).rows() == rows


def test_batch_summaries_add_up() -> None:
    tally = Tally()
    tally.skipped(pending("e1"))
    total = BatchSummary()
    for version in (3, 4):
        total.merge(BatchSummary(events=10, quarantined=Counter(oversize=1), filtered=2, held=5,
                                 deliveries=tally, batches=1, registry_version=version))
    assert (total.events, total.filtered, total.batches, total.registry_version) == (20, 4, 2, 4)
    assert total.quarantined == Counter(oversize=2) and total.held == 10
    assert total.deliveries.total(Outcome.SKIPPED) == 2


def test_failure_reasons_have_few_values() -> None:
    assert failure_reason(answer(429)) == "http_429"
    assert failure_reason(Failure(FailureKind.CIRCUIT_OPEN, "open")) == "circuit_open"
