"""An endpoint's delivery health from the attempt log, in the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wayline.core.errors import NotFound
from wayline.delivery.storage.attempt_log import endpoint_health
from wayline.delivery.storage.store import AttemptLogEntry, DeliveryLogEntry
from wayline.registry import customer
from wayline.registry.access import ADMIN, Caller
from wayline.registry.endpoint import EndpointIn, EndpointService

pytestmark = pytest.mark.integration


def test_health_counts_sent_attempts_per_bucket_with_their_p95_latency(api_settings, database, unique) -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    with database.transaction() as s:
        owner = customer.create(s, ADMIN, customer.CustomerIn(name=f"Health {unique}"))
        endpoint = EndpointService.from_settings(api_settings).create(
            s, ADMIN, EndpointIn(url="http://127.0.0.1:9/h", customer_id=owner.id))
        common = {"endpoint_id": endpoint.id, "subscription_id": "sub_h"}
        # First 5 minutes: 20 successes of 10, 20 … 200 ms and one failure of 10 ms: 21 latencies,
        # whose 95th percentile (continuous) is the 20th smallest, 190 ms.
        for n in range(20):
            s.add(DeliveryLogEntry(**common, webhook_id=f"{unique}-a{n}", status=200, attempt=1,
                                   latency_ms=10 * (n + 1), delivered_at=start + timedelta(seconds=n)))
        s.add(AttemptLogEntry(**common, webhook_id=f"{unique}-f", attempt=1, status=500, error="HTTP 500",
                              latency_ms=10, attempted_at=start + timedelta(seconds=30)))
        # Held back (not sent): counts for nothing. Next bucket: one failure only.
        s.add(AttemptLogEntry(**common, webhook_id=f"{unique}-h", attempt=2, status=None, error="circuit open",
                              latency_ms=0, attempted_at=start + timedelta(seconds=40), held_back=True))
        s.add(AttemptLogEntry(**common, webhook_id=f"{unique}-g", attempt=1, status=503, error="HTTP 503",
                              latency_ms=40, attempted_at=start + timedelta(minutes=7)))

    with database.transaction() as s:
        buckets = endpoint_health(s, ADMIN, endpoint.id, start, timedelta(minutes=5))
        overall = endpoint_health(s, ADMIN, endpoint.id, start)
        stranger = Caller(key_id="k", customer_id="cus_someone_else")
        with pytest.raises(NotFound):
            endpoint_health(s, stranger, endpoint.id, start)

    assert [(b.start, b.attempts, b.succeeded) for b in buckets] == [
        (start, 21, 20), (start + timedelta(minutes=5), 1, 0)]
    assert buckets[0].p95_latency_ms == 190
    assert buckets[1].p95_latency_ms == 40
    assert (overall[0].attempts, overall[0].succeeded, round(overall[0].success_rate, 3)) == (22, 20, 0.909)
