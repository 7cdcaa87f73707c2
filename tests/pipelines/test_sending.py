"""The send step's tasks against a real HTTP receiver on 127.0.0.1 and the real PostgreSQL:
the operator's URL allow-list, as the job's settings hold it now, decides at send time."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from aiohttp import web
from sqlalchemy import select

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.delivery.outcomes import BatchSummary, Outcome
from wayline.delivery.stage import StageSettings
from wayline.delivery.storage.store import AttemptLogEntry, DeliveryLogEntry, RetryEntry
from wayline.delivery.targets import Target
from wayline.delivery.transports.base import EndpointLimits
from wayline.pipelines.sending import SUMMARY_SCHEMA, PartitionSender, task_settings

pytestmark = pytest.mark.integration

WORK = pa.schema([("kind", pa.string()), ("subscription_id", pa.string()), ("endpoint_id", pa.string()),
                  ("event_ids", pa.list_(pa.string())), ("body", pa.binary()), ("topic", pa.string()),
                  ("key", pa.binary()), ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                  ("reason", pa.string()), ("events", pa.int32()), ("source", pa.string())])


def deliveries(endpoint_id: str, event_id: str) -> pa.RecordBatch:
    body = orjson.dumps({"specversion": "1.0", "id": event_id, "source": "/s", "type": "t", "tenantid": "7"})
    return pa.RecordBatch.from_pylist([{"kind": "single", "subscription_id": f"sub_{endpoint_id}",
                                        "endpoint_id": endpoint_id, "event_ids": [event_id], "body": body,
                                        "events": 1}],
                                      schema=WORK)


def test_an_endpoint_created_while_loopback_was_allowed_is_refused_once_the_job_no_longer_allows_it(
    spark, api_settings: Settings, settings: Settings, database, unique: str,
) -> None:
    from wayline.pipelines.delivery import ensure_delivery_topics

    assert not settings.registry.url_allow_list, "the plain settings allow nothing"
    ensure_delivery_topics(settings)
    recorder = Recorder()
    endpoint = f"ep_{unique}_narrowed"

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    with Receivers() as receivers:
        base = receivers.serve({"/hook": hook})
        target = Target(endpoint, f"{base}/hook", timeout_s=5, limits=EndpointLimits(), secrets=(Secret.generate(),))
        targets = spark.sparkContext.broadcast({endpoint: target})
        stage = StageSettings(deadline_s=5)
        allowed = PartitionSender(targets, task_settings(api_settings), stage)
        narrowed = PartitionSender(targets, task_settings(settings), stage)
        [before] = allowed(iter([deliveries(endpoint, f"{unique}-before")]))
        [after] = narrowed(iter([deliveries(endpoint, f"{unique}-after")]))

    assert [r.path for r in recorder.requests] == ["/hook"], "only the allowed send reached the receiver"
    assert before.schema == SUMMARY_SCHEMA
    summary_before, summary_after = (BatchSummary.from_json(b.column("summary")[0].as_py()) for b in (before, after))
    assert summary_before.events == 1 and summary_before.deliveries.total(Outcome.DELIVERED) == 1
    assert summary_after.deliveries.total(Outcome.DELIVERED) == 0
    [(_, refused)] = summary_after.deliveries.items()
    assert dict(refused.failures) == {"address_refused": 1}
    with database.transaction() as session:
        delivered = session.scalars(select(DeliveryLogEntry).where(DeliveryLogEntry.endpoint_id == endpoint)).all()
        [attempt] = session.scalars(select(AttemptLogEntry).where(AttemptLogEntry.endpoint_id == endpoint)).all()
        [handed] = session.scalars(select(RetryEntry).where(RetryEntry.endpoint_id == endpoint)).all()
    assert len(delivered) == 1
    assert attempt.status is None and "127.0.0.1 is not a public address (loopback)" in attempt.error
    assert "registry.url_allow_list" in attempt.error
    assert handed.dead_reason is not None and handed.attempts == 1, "refused for good, not retried on a schedule"
