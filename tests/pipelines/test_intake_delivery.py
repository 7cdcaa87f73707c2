"""`wayline run delivery` with the intake on, end to end: events on several topics reach the
receiver signed, and the self-audit names each one's original topic, partition and offset."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from tests.delivery.receivers import Receivers
from tests.delivery.runtime.test_senders import Arrivals, audit_outcomes
from tests.pipelines.conftest import start_detached
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.delivery.signing import message_id
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 60


def test_events_fanned_in_reach_the_receiver_signed_and_are_audited_at_their_origin(
        api_settings: Settings, database, unique: str, tmp_path: Path) -> None:
    name = f"ind{unique}"
    bootstrap = api_settings.kafka_bootstrap()
    topics = [f"events.{name}.{suffix}" for suffix in "abc"]
    ensure_topics(bootstrap, topics, 2)
    event_type, tenant = f"{name}.happened", f"{name}-t"
    secret = Secret.generate().text
    arrivals = Arrivals({"/hook": secret})
    with Receivers() as receivers:
        base = receivers.serve({"/hook": arrivals.handle})
        with database.transaction() as s:
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=event_type))
            catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=tenant)])
            owner = customer.create(s, ADMIN, customer.CustomerIn(name=f"{name} customer"))
            endpoint = EndpointService.from_settings(api_settings).create(s, ADMIN, EndpointIn(
                url=f"{base}/hook", customer_id=owner.id, secret=secret, max_in_flight=32))
            subscription_id = subscription.create(s, ADMIN, subscription.SubscriptionIn(
                endpoint_id=endpoint.id, event_types=[event_type])).id
        job_settings = api_settings.model_copy(update={"state_dir": tmp_path / "state"})
        log = tmp_path / "job.log"
        job = start_detached("delivery", job_settings, api_settings, log, {
            "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": f"events.{name}.",
            "WAYLINE_KAFKA__ALERT_TOPIC_PREFIX": f"alerts.{name}.",
            "WAYLINE_DELIVERY__INTAKE": "on",
            "WAYLINE_DELIVERY__INTAKE_TOPIC": f"wayline.intake.{name}",
            "WAYLINE_DELIVERY__INTAKE_GROUP": f"intake-{name}",
            "WAYLINE_DELIVERY__WORK_TOPIC": f"wayline.work.{name}",
            "WAYLINE_DELIVERY__BATCH_TOPIC": f"wayline.batching.{name}",
            "WAYLINE_DELIVERY__SENDER_GROUP": f"senders-{name}",
            "WAYLINE_DELIVERY__SENDER_PROCESSES": "1",
            "WAYLINE_DELIVERY__METRICS_PORT": "0",
            "WAYLINE_DELIVERY__REALTIME_CHECKPOINT_S": "5",
            "WAYLINE_DELIVERY__STRAGGLER_CUT_S": "5",
        })
        try:
            wait_for(lambda: b"delivering;" in log.read_bytes() or job.poll() is not None, "the job to run", 300)
            assert b"intake processes" in log.read_bytes(), log.read_text()
            origins: dict[str, tuple[str, int, int]] = {}

            def delivered(error: object, message) -> None:
                assert error is None
                origins[orjson.loads(message.value())["id"]] = (message.topic(), message.partition(), message.offset())

            producer = Producer({"bootstrap.servers": bootstrap})
            events = [f"{name}-{n}" for n in range(EVENTS)]
            for n, event_id in enumerate(events):
                producer.produce(topics[n % 3], orjson.dumps({
                    "specversion": "1.0", "id": event_id, "source": "/intake", "type": event_type,
                    "tenantid": tenant, "data": {"n": n}}), key=f"k{n % 5}".encode(), on_delivery=delivered)
            broken: list[tuple[str, int, int]] = []
            producer.produce(topics[1], b"not json", on_delivery=lambda error, message: broken.append(
                (message.topic(), message.partition(), message.offset())))
            assert producer.flush(30) == 0
            sent = {message_id(event_id, subscription_id) for event_id in events}
            wait_for(lambda: arrivals.ids() >= sent or job.poll() is not None, "every event at the receiver", 240)
            assert job.poll() is None, log.read_text()
            time.sleep(1)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    assert arrivals.ids() == sent and arrivals.bad_signatures == 0
    outcomes = audit_outcomes(api_settings, {f"{subscription_id}/{e}" for e in events})
    assert {key: (o["outcome"], o["topic"]) for key, o in outcomes.items()} == {
        f"{subscription_id}/{e}": ("delivered", origins[e][0]) for e in events}
    # A record settled in the matching query is audited as read from its own topic, too.
    quarantined = "/".join(map(str, broken[0]))
    outcome, = audit_outcomes(api_settings, {quarantined}).values()
    assert (outcome["outcome"], outcome["topic"], outcome["record"]) == ("quarantined", topics[1], quarantined)
