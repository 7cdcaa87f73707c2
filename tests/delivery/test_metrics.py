"""The Prometheus view of the summaries, scraped over HTTP from 127.0.0.1."""

import random
import urllib.request
from collections import Counter
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from wayline.core.metrics import serve_metrics
from wayline.delivery.attempt import Pending, settle
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary, Outcome, Tally
from wayline.delivery.transports.base import Failure, FailureKind, Response, Result

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def summary() -> BatchSummary:
    tally = Tally()
    rng = random.Random(1)
    outcomes: list[tuple[str, Result]] = [
        ("sub_1", Response(200, {}, b"", 0.004)),
        ("sub_1", Response(200, {}, b"", 0.3)),
        ("sub_2", Response(503, {}, b"", 0.02)),
        ("sub_2", Failure(FailureKind.DEADLINE, "cut", 5.0)),
    ]
    for n, (subscription, outcome) in enumerate(outcomes):
        p = Pending.single(f"e{n}", b"{}", subscription_id=subscription, endpoint_id="ep_1", now=NOW)
        tally.settled(settle(p, outcome, NOW, rng))
    return BatchSummary(events=7, quarantined=Counter(not_json=2), filtered=3, held=4,
                        phase_seconds=Counter(parse=0.5, send=1.25), deliveries=tally, batches=1, registry_version=12)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def test_the_endpoint_serves_the_running_totals() -> None:
    metrics = DeliveryMetrics()
    server = serve_metrics(metrics, "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
    try:
        assert server.url.startswith("http://127.0.0.1:")
        metrics.add(summary())
        metrics.add(summary())
        got = samples(urllib.request.urlopen(server.url, timeout=5).read().decode())
    finally:
        server.close()

    def delivered(subscription: str, outcome: str) -> float:
        return got[("wayline_deliveries_total", (("endpoint", "ep_1"), ("outcome", outcome), ("subscription", subscription)))]

    seen = metrics.overview()
    assert (seen.batches, seen.events, seen.filtered, seen.quarantined) == (2, 14, 6, 4)
    assert seen.deliveries == Counter({Outcome.DELIVERED: 4, Outcome.RETRIED: 4})
    assert delivered("sub_1", "delivered") == 4
    assert delivered("sub_2", "retried") == 4
    assert delivered("sub_2", "delivered") == 0
    assert got[("wayline_delivery_failures_total", (("endpoint", "ep_1"), ("reason", "deadline")))] == 2
    assert got[("wayline_delivery_failures_total", (("endpoint", "ep_1"), ("reason", "http_503")))] == 2
    histogram = (("endpoint", "ep_1"),)
    assert got[("wayline_delivery_latency_seconds_count", histogram)] == 6, "answers only"
    assert got[("wayline_delivery_latency_seconds_bucket", histogram + (("le", "0.005"),))] == 2
    assert got[("wayline_delivery_latency_seconds_bucket", histogram + (("le", "0.25"),))] == 4
    assert got[("wayline_delivery_latency_seconds_sum", histogram)] == pytest.approx(2 * 0.324)
    assert got[("wayline_events_total", ())] == 14
    assert got[("wayline_events_filtered_total", ())] == 6
    assert got[("wayline_events_quarantined_total", (("reason", "not_json"),))] == 4
    assert got[("wayline_batch_pairs_held_total", ())] == 8
    assert got[("wayline_micro_batch_seconds_total", (("phase", "send"),))] == 2.5
    assert got[("wayline_micro_batches_total", ())] == 2
    assert got[("wayline_registry_version", ())] == 12
