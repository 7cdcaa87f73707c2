"""The messaging service: everything a request needs, made once per process, and the publish flow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wayline.core.settings import EnvelopeSettings, MessagingSettings, Settings
from wayline.core.topics import ReservedTopics
from wayline.messaging.access import Authorizer
from wayline.messaging.idempotency import Answer, PublishLedger, fingerprint
from wayline.messaging.poll import Poller
from wayline.messaging.producer import KnownTopics, Publisher
from wayline.messaging.records import Outgoing, Refused, Result, check, read_body, result_body
from wayline.messaging.schemas import SchemaCatalog
from wayline.messaging.topics import TopicAdmin
from wayline.messaging.transactions import TransactionPool
from wayline.registry.db import Database

# Refusals of a lone event that are the broker's fault, not the event's.
BROKER_CODES = frozenset({"kafka", "timeout"})


@dataclass
class Messaging:
    settings: MessagingSettings
    envelope: EnvelopeSettings
    publisher: Publisher
    known: KnownTopics
    transactions: TransactionPool
    poller: Poller
    topics: TopicAdmin
    schemas: SchemaCatalog
    ledger: PublishLedger
    authorizer: Authorizer
    reserved: ReservedTopics

    @classmethod
    def start(cls, settings: Settings, database: Database) -> Messaging:
        m = settings.messaging
        bootstrap = settings.kafka_bootstrap()
        reserved = ReservedTopics.from_settings(settings)
        return cls(
            settings=m,
            envelope=settings.envelope,
            publisher=Publisher(bootstrap, m.linger_ms, m.delivery_timeout_ms),
            known=KnownTopics(bootstrap),
            transactions=TransactionPool(bootstrap, m.instance_id, m.transaction_producers, m.transactions_per_key,
                                         m.transaction_timeout_s, m.linger_ms, m.delivery_timeout_ms),
            poller=Poller(bootstrap, m.poll_consumers),
            topics=TopicAdmin(bootstrap, reserved),
            schemas=SchemaCatalog(database, m.schema_cache_s),
            ledger=PublishLedger(database, m.idempotency_pending_s),
            authorizer=Authorizer(database, m.auth_cache_s, reserved),
            reserved=reserved,
        )

    def publish(self, key_id: str, topic: str, body: bytes, idempotency_key: str | None = None,
                transaction: str | None = None) -> tuple[Answer, bool]:
        """The answer to a publish request, and whether it is a replay of an earlier one.

        Everything that can be checked is checked before the broker is touched."""
        events, batch = read_body(body, self.settings.max_batch_events)
        checked = check(events, self.envelope, self.schemas)
        self.known.require(topic)
        if idempotency_key is None:
            return _answer(self._write(key_id, topic, checked, transaction), batch), False
        # Claimed even when every event is refused, so that a key already answered replays that answer.
        replay = self.ledger.claim(key_id, idempotency_key, fingerprint(topic, events if batch else events[0]))
        if replay is not None:
            return replay, True
        try:
            results = self._write(key_id, topic, checked, transaction)
        except BaseException:
            self.ledger.release(key_id, idempotency_key)
            raise
        answer = _answer(results, batch)
        if any(isinstance(c, Outgoing) for c in checked):
            self.ledger.settle(key_id, idempotency_key, answer)
        else:  # refused by validation before any effect: the key is not used up
            self.ledger.release(key_id, idempotency_key)
        return answer, False

    def _write(
        self, key_id: str, topic: str, checked: list[Outgoing | Refused], transaction: str | None,
    ) -> list[Result]:
        outgoing = [c for c in checked if isinstance(c, Outgoing)]
        if not outgoing:
            written: list[Result] = []
        elif transaction is None:
            written = self.publisher.publish(topic, outgoing)
        else:
            written = self.transactions.publish(transaction, key_id, topic, outgoing)
        by_index = {r.index: r for r in written}
        return [c if isinstance(c, Refused) else by_index[c.index] for c in checked]

    def close(self) -> None:
        self.transactions.close()
        self.publisher.close()
        self.poller.close()


def _answer(results: list[Result], batch: bool) -> Answer:
    refused = [r for r in results if isinstance(r, Refused)]
    body: dict[str, Any] = {"results": [result_body(r) for r in results]}
    if not refused:
        return Answer(200, body)
    if not batch:
        only = refused[0]
        status = 503 if only.code in BROKER_CODES else 413 if only.code == "oversize" else 422
        return Answer(status, {"error": {"code": only.code, "message": only.message}, **body})
    if len(refused) == len(results):
        first = refused[0]
        return Answer(422, {"error": {"code": "invalid", "message": f"none of the {len(results)} events was written; "
                                                                     f"the first refusal: {first.message}"}, **body})
    return Answer(207, body)


__all__ = ["BROKER_CODES", "Messaging"]
