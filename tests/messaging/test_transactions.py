"""The transactional producer pool on the real broker: its bound, ownership, and fencing on restart."""

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from wayline.core.errors import Conflict, NotFound, TooMany
from wayline.core.kafka import ensure_topics
from wayline.messaging.errors import Busy
from wayline.messaging.records import Outgoing, Written
from wayline.messaging.transactions import TransactionPool

pytestmark = pytest.mark.integration


def pool(settings, instance: str, size: int = 1, per_key: int = 1) -> TransactionPool:
    return TransactionPool(settings.kafka_bootstrap(), instance, size, per_key, timeout_s=30, linger_ms=1,
                           delivery_timeout_ms=10_000)


def committed_values(settings, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap(), "group.id": "t", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error():
                return values
            values.append(message.value())
    finally:
        consumer.close()


def records(*ids: str) -> list[Outgoing]:
    return [Outgoing(n, b"t", orjson.dumps({"id": i})) for n, i in enumerate(ids)]


def test_the_pool_is_bounded_and_a_transaction_is_its_owners(settings, unique) -> None:
    topic = f"txn.{unique}"
    ensure_topics(settings.kafka_bootstrap(), [topic], 1)
    transactions = pool(settings, f"bound-{unique}")
    try:
        first = transactions.begin("key_a")
        with pytest.raises(Busy, match="all 1 transactional producers of instance"):
            transactions.begin("key_b")
        with pytest.raises(NotFound):
            transactions.publish(first.id, "key_b", topic, records("x"))
        assert isinstance(transactions.publish(first.id, "key_a", topic, records("a"))[0], Written)
        assert transactions.commit(first.id, "key_a").state == "committed"
        second = transactions.begin("key_b")  # the slot is free again
        transactions.abort(second.id, "key_b")
    finally:
        transactions.close()
    assert committed_values(settings, topic) == [b'{"id":"a"}']


def test_a_restarted_instance_fences_its_old_producers(settings, unique) -> None:
    topic = f"txn.{unique}"
    ensure_topics(settings.kafka_bootstrap(), [topic], 1)
    old = pool(settings, f"fence-{unique}")
    txn = old.begin("key_a")
    old.publish(txn.id, "key_a", topic, records("zombie"))
    restarted = pool(settings, f"fence-{unique}")
    try:
        restarted.begin("key_a")  # init_transactions with the same transactional id fences `old`
        with pytest.raises(Conflict, match="could not commit"):
            old.commit(txn.id, "key_a")
    finally:
        restarted.close()
        old.close()
    assert committed_values(settings, topic) == []


def test_one_key_holds_at_most_its_share_of_the_pool(settings, unique) -> None:
    transactions = pool(settings, f"share-{unique}", size=3, per_key=2)
    try:
        first, _second = transactions.begin("key_a"), transactions.begin("key_a")
        with pytest.raises(TooMany, match="this API key holds 2 open transactions on instance share-"):
            transactions.begin("key_a")
        other = transactions.begin("key_b")  # the slot key_a may not take is still there for others
        transactions.abort(first.id, "key_a")
        transactions.begin("key_a")
        transactions.abort(other.id, "key_b")
    finally:
        transactions.close()
