"""The typed client, sync and async, against the messaging API on the real broker."""

from __future__ import annotations

import asyncio

import pytest

from wayline.messaging.client import AsyncMessagingClient, MessagingClient, MessagingError

pytestmark = pytest.mark.integration


def event(n: int) -> dict:
    return {"specversion": "1.0", "id": f"c{n}", "source": "/client", "type": "order.created", "tenantid": "t-a",
            "data": {"n": n}}


def test_the_sync_client_publishes_pages_and_commits(messaging_api, admin_key, unique) -> None:
    with MessagingClient(messaging_api, admin_key) as client:
        topic = f"client.{unique}"
        assert [p.partition for p in client.create_topic(topic, partitions=2).partitions] == [0, 1]
        assert topic in client.list_topics()
        answer = client.publish(topic, [event(n) for n in range(5)], idempotency_key="c-1")
        assert all(r.error is None and r.offset is not None for r in answer.results)
        assert client.publish(topic, [event(n) for n in range(5)], idempotency_key="c-1") == answer

        txn = client.begin()
        client.publish(topic, event(5), transaction=txn.id)
        assert client.commit(txn.id).state == "committed"

        seen, cursor = [], None
        while True:
            page = client.poll(topic, cursor=cursor, limit=2)
            if not page.records:
                break
            seen += [r.event["id"] for r in page.records]
            cursor = page.next_cursor
        assert sorted(seen) == [f"c{n}" for n in range(6)]
        assert client.describe_topic(topic).records >= 6

        with pytest.raises(MessagingError) as refused:
            client.publish(topic, {"id": "x"})
        assert (refused.value.status, refused.value.code) == (422, "missing_attribute")
        assert refused.value.message == "event 0 (id 'x'): missing CloudEvents attribute(s): specversion, source, type"
        client.delete_topic(topic)
        assert topic not in client.list_topics()


def test_the_async_client_does_the_same(messaging_api, admin_key, unique) -> None:
    async def scenario() -> list[str]:
        async with AsyncMessagingClient(messaging_api, admin_key) as client:
            topic = f"client.{unique}"
            await client.create_topic(topic, partitions=1)
            await client.publish(topic, [event(n) for n in range(3)])
            txn = await client.begin()
            await client.publish(topic, event(3), transaction=txn.id)
            assert (await client.abort(txn.id)).state == "aborted"
            page = await client.poll(topic, limit=10)
            return [r.event["id"] for r in page.records]

    assert asyncio.run(scenario()) == ["c0", "c1", "c2"]
