"""Alerts to webhooks, end to end: a pattern deployed through the admin API, its match
delivered to a customer's endpoint on 127.0.0.1, signed, and retried when the endpoint
first fails.

The rule writes to an alert topic (``kafka.alert_topic_prefix``), so its output type enters
the catalog and a customer subscribes to it through the API like to any event type. The
rules job, the delivery job and the retry drain run as they do in production, in one Spark
session; events go to the real broker, the webhook to a real HTTP receiver.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from standardwebhooks import Webhook

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder
from tests.pipelines.test_rules import LOGINS, event
from tests.waiting import holds_for, wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import DeliverySettings, Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.signing import message_id
from wayline.registry.endpoint import EndpointService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANT = "alr-t"


@pytest.fixture(scope="module")
def delivered(api_settings: Settings, database, spark, admin_api: str, admin_key: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from wayline.delivery.runtime.retries import start_retries
    from wayline.pipelines.delivery import start_delivery
    from wayline.pipelines.rules_job import RulesJob

    suffix = str(time.time_ns())[-8:]
    # Topics of this test only: its jobs read nothing another test writes.
    events_prefix, alerts_prefix = f"events.alr{suffix}.", f"alerts.alr{suffix}."
    alert_topic, alert_type = f"{alerts_prefix}logins", f"security.login.suspicious.{suffix}"
    settings = api_settings.model_copy(update={
        "kafka": api_settings.kafka.model_copy(update={"event_topic_prefix": events_prefix,
                                                        "alert_topic_prefix": alerts_prefix}),
        "rules": api_settings.rules.model_copy(update={"allowed_lateness_s": 0.0, "shards": 4}),
        "delivery": DeliverySettings(stage_deadline_s=2.0, version_poll_s=0.5, trigger_interval_s=0.5,
                                     send_partitions=1, retry_schedule_s=[0.0, 1.0, 1.0], retry_jitter=0.0,
                                     retry_poll_s=0.5, retry_lease_s=3.0,
                                     operations_topic=f"{events_prefix}operations"),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [events_prefix + "in"], 2)
    root = tmp_path_factory.mktemp("alerts")
    recorder = Recorder()
    attempts: Counter[str] = Counter()

    async def flaky(request: web.Request) -> web.Response:
        # The first attempt at each message fails: the match arrives by a retry.
        await recorder.record(request)
        attempts[request.headers["webhook-id"]] += 1
        return web.Response(status=503 if attempts[request.headers["webhook-id"]] == 1 else 204)

    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    with Receivers() as receivers:
        base = receivers.serve({"/alerts": flaky})
        rule = api.post("/rules", json={"name": f"alerts-logins-{suffix}", "sql": LOGINS,
                                        "output_topic": alert_topic, "output_type": alert_type})
        assert rule.status_code == 201, rule.text
        # The output type is in the catalog now: the customer subscribes to it.
        assert api.put("/tenants", json=[{"id": TENANT}]).status_code == 200
        owner = api.post("/customers", json={"name": f"Alerts {suffix}"}).json()
        endpoint = api.post("/endpoints", json={"url": f"{base}/alerts", "customer_id": owner["id"]}).json()
        subscribed = api.post("/subscriptions", json={"endpoint_id": endpoint["id"], "event_types": [alert_type],
                                                      "tenant_scope": "tenants", "tenants": [TENANT]})
        assert subscribed.status_code == 201, subscribed.text

        producer = Producer({"bootstrap.servers": bootstrap})
        # u1: three failed logins then a success within five minutes (the match); u2: two.
        records = [(user, event(f"{user}-f{n}", "rul.login.failed", 10 + n, {"user": user}, tenant=TENANT))
                   for user, failures in (("u1", 3), ("u2", 2)) for n in range(failures)]
        records += [(user, event(f"{user}-ok", "rul.login.ok", 40, {"user": user}, tenant=TENANT))
                    for user in ("u1", "u2")]
        records.append(("clock", event("clock", "rul.clock", 3600, {"user": "clock"}, tenant=TENANT)))
        for key, value in records:
            producer.produce(events_prefix + "in", key=key.encode(), value=value)
        assert producer.flush(30) == 0

        endpoints = EndpointService.from_settings(settings)
        metrics = DeliveryMetrics()
        rules = RulesJob(spark, settings, database, root / "rules").start()
        delivery = start_delivery(spark, settings, database, endpoints, metrics, checkpoint=root / "delivery")
        retries = start_retries(settings, database, endpoints, metrics)
        try:
            def arrived() -> bool:
                rules.raise_if_failed()
                assert delivery.isActive and retries.isActive
                return any(status >= 2 for status in attempts.values())

            wait_for(arrived, "the match delivered by a retry", 300)
            # Nothing else reaches the endpoint: no other match, no third attempt (the retry
            # schedule's steps are 1 s, so a third attempt would come within this look).
            sent = len(recorder.on("/alerts"))
            holds_for(lambda: len(recorder.on("/alerts")) == sent, f"{sent} requests at the endpoint", 2)
        finally:
            retries.stop()
            delivery.stop()
            rules.stop()
            # Other tests' jobs run every running rule and deliver every alert topic: without
            # the rule and the subscription, nothing more reaches this test's endpoint.
            api.delete(f"/subscriptions/{subscribed.json()['id']}")
            api.delete(f"/rules/{rule.json()['id']}")
            api.close()
            # Other tests' delivery jobs read every alert topic (kafka.alert_topic_prefix) and
            # count what they read.
            kafka_admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in kafka_admin.delete_topics([alert_topic]).values():
                future.result(30)
        yield {"requests": list(recorder.on("/alerts")), "secret": endpoint["secret"], "rule": rule.json(),
               "subscription": subscribed.json(), "alert_type": alert_type}


def test_a_pattern_s_match_reaches_the_subscribed_endpoint(delivered: dict[str, Any]) -> None:
    bodies = {orjson.loads(request.body)["id"]: orjson.loads(request.body) for request in delivered["requests"]}
    [match] = bodies.values()
    assert match["type"] == delivered["alert_type"]
    assert match["source"] == f"wayline.rules/{delivered['rule']['name']}"
    assert (match["subject"], match["tenantid"]) == ("u1", TENANT)
    assert (match["data"]["failures"], match["data"]["success_id"]) == (3, "u1-ok")


def test_the_match_is_signed_and_retried_under_one_webhook_id(delivered: dict[str, Any]) -> None:
    requests = delivered["requests"]
    assert len(requests) == 2  # the failed first attempt and the retry
    match_id = orjson.loads(requests[0].body)["id"]
    expected = message_id(match_id, delivered["subscription"]["id"])
    assert [request.headers["webhook-id"] for request in requests] == [expected, expected]
    for request in requests:
        Webhook(delivered["secret"]).verify(request.body, request.headers)
