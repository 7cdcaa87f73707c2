"""`wayline produce`: realistic CloudEvents at a chosen rate, for demos and benchmarks.

The catalog: 500 event types (20 domains × 5 entities × 5 actions), on one of three topic
*layouts*: a topic per domain (`events.<domain>`, 20 topics: the demo's), a topic per
event type (`events.<domain>.<entity>.<action>`, 500 topics: the design brief's count),
or one ingest topic for every type (`events.ingest`); 30,000
tenants, a quarter of them with departments as sub-tenants; traffic skewed toward a few
hot tenants, as on a real SaaS platform. Payloads stay
under 1 KB. A fraction of deliberately broken records exercises the quarantine.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

import orjson

from wayline.core.errors import RetryLater

if TYPE_CHECKING:
    from confluent_kafka import Producer

DOMAINS = (
    "billing", "orders", "crm", "inventory", "shipping", "payments", "identity", "support",
    "marketing", "analytics", "hr", "finance", "catalog", "subscriptions", "notifications",
    "security", "storage", "compute", "messaging", "audit",
)
ENTITIES = ("account", "invoice", "item", "request", "session")
ACTIONS = ("created", "updated", "deleted", "completed", "failed")
DEPARTMENTS = ("d-100", "d-200", "d-300")
CURRENCIES = ("EUR", "USD", "GBP", "JPY", "CHF")
STATUSES = ("new", "active", "pending", "closed", "error")
INGEST = "ingest"
"""The one topic's name after the prefix in the ingest layout."""
Layout = Literal["domains", "types", "ingest"]
LAYOUTS: tuple[Layout, ...] = ("domains", "types", "ingest")
TICK_S = 0.01
"""A paced stream sends what is due every this often: a steady stream, not in bursts."""
STAMP_EVERY_S = 0.001
"""How often a record's `time` is read from the clock: its precision as written."""
PROGRESS_EVERY = 1000
"""An unpaced stream reports progress, and looks at ``stop``, every this many records."""
REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "ap-south")
TOPICS_PER_PRODUCER = 64
"""librdkafka sends a produce request per partition, and the broker takes a connection's
requests one at a time: one producer writing 500 one-partition topics at 1,000 events/s
sends about a request per event down one connection. In one probe it had 5,000 requests in
flight and the broker appended records up to 29 s after they were made, where 8 producers
saw 0.05 s at the p99; later runs on a warmer broker did not repeat the gap (the first
seconds of any new load on 500 topics can lag; docs/benchmarks.md, issue 25, "The 500-topic
stall, second look"). A user's hundreds of topics are written by many services, so the load
generator spreads its topics over producers too."""


@dataclass(frozen=True)
class EventType:
    name: str
    topic: str


def catalog(topic_prefix: str = "events.", *, layout: Layout = "domains") -> list[EventType]:
    def topic(domain: str, entity: str, action: str) -> str:
        return {"domains": domain, "types": f"{domain}.{entity}.{action}", "ingest": INGEST}[layout]

    return [
        EventType(f"com.wayline.{domain}.{entity}.{action}", f"{topic_prefix}{topic(domain, entity, action)}")
        for domain in DOMAINS for entity in ENTITIES for action in ACTIONS
    ]


def topics(topic_prefix: str = "events.", *, layout: Layout = "domains") -> list[str]:
    return sorted({event_type.topic for event_type in catalog(topic_prefix, layout=layout)})


def tenant_id(index: int) -> str:
    return f"t-{index:05d}"


def subtenants_of(index: int) -> tuple[str, ...]:
    """Every fourth tenant has departments; the rest have no sub-tenants."""
    return DEPARTMENTS if index % 4 == 0 else ()


@dataclass(frozen=True)
class Record:
    topic: str
    key: bytes
    value: bytes


class EventFactory:
    """Makes records fast enough to feed 50,000 events/s from one Python thread."""

    BROKEN_KINDS = ("not_json", "missing_tenant", "oversize", "bad_specversion")

    def __init__(
        self, *, seed: int = 7, tenants: int = 30_000, topic_prefix: str = "events.",
        bad_fraction: float = 0.0, run_id: str | None = None, layout: Layout = "domains",
    ) -> None:
        self._rng = random.Random(seed)
        self._types = catalog(topic_prefix, layout=layout)
        self._tenants = tenants
        self._bad_fraction = bad_fraction
        self._run_id = run_id or f"{seed:x}{int(time.time() * 1000):x}"
        self._seq = 0
        self._now = ""
        self._stamped = -math.inf

    def records(self, count: int | None = None) -> Iterator[Record]:
        made = 0
        while count is None or made < count:
            # `time` is what receivers measure end-to-end latency from, so it is the time the
            # record is made, to the millisecond it is written in; reading the clock once per
            # millisecond, not per record, keeps 50,000 events/s within one thread.
            if (now := time.monotonic()) - self._stamped >= STAMP_EVERY_S:
                self._stamped = now
                self._now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            yield self.broken() if self._rng.random() < self._bad_fraction else self.valid()
            made += 1

    def valid(self, event_type: EventType | None = None, tenant: int | None = None) -> Record:
        rng = self._rng
        event_type = event_type or self._types[rng.randrange(len(self._types))]
        # Cubing a uniform draw skews traffic toward low tenant numbers: a few hot tenants.
        tenant = tenant if tenant is not None else int(self._tenants * rng.random() ** 3)
        self._seq += 1
        body: dict[str, object] = {
            "specversion": "1.0",
            "id": f"{self._run_id}-{self._seq}",
            "source": "/" + event_type.topic.rsplit(".", 1)[-1],
            "type": event_type.name,
            "time": self._now,
            "subject": f"{event_type.name.split('.')[3]}/{rng.randrange(1_000_000)}",
            "datacontenttype": "application/json",
            "tenantid": tenant_id(tenant),
            "data": {
                "amount": round(rng.random() * 1000, 2),
                "currency": CURRENCIES[rng.randrange(5)],
                "status": STATUSES[rng.randrange(5)],
                "region": REGIONS[rng.randrange(5)],
                "user": {"id": f"u-{rng.randrange(100_000)}", "tier": rng.randrange(1, 4)},
                "items": [{"sku": f"sku-{rng.randrange(5000)}", "qty": rng.randrange(1, 10)}
                          for _ in range(rng.randrange(1, 4))],
            },
        }
        departments = subtenants_of(tenant)
        if departments:
            body["subtenantid"] = departments[rng.randrange(len(departments))]
        return Record(event_type.topic, body["tenantid"].encode(), orjson.dumps(body))  # type: ignore[union-attr]

    def broken(self, kind: str | None = None, event_type: EventType | None = None) -> Record:
        kind = kind or self.BROKEN_KINDS[self._rng.randrange(len(self.BROKEN_KINDS))]
        good = self.valid(event_type)
        body = orjson.loads(good.value)
        if kind == "not_json":
            value = b"<html>this is not an event</html>"
        elif kind == "missing_tenant":
            body.pop("tenantid")
            value = orjson.dumps(body)
        elif kind == "oversize":
            body["data"]["blob"] = "x" * 2048
            value = orjson.dumps(body)
        elif kind == "bad_specversion":
            body["specversion"] = "0.3"
            value = orjson.dumps(body)
        else:
            raise ValueError(f"unknown broken kind {kind!r}; use one of {self.BROKEN_KINDS}")
        return Record(good.topic, good.key, value)


@dataclass(frozen=True)
class ProduceSummary:
    sent: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


def paced(rate: float, seconds: float = math.inf, *, tick_s: float = TICK_S,
          stop: threading.Event | None = None) -> Iterator[int]:
    """How many events are due at each tick, every ``tick_s``, for ``rate`` per second from
    the first tick: for ``seconds``, or until ``stop`` is set."""
    began, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - began) < seconds and not (stop is not None and stop.is_set()):
        due = int(rate * elapsed) - sent
        yield due
        sent += due
        time.sleep(tick_s)


class Producers:
    """Producers sharing the topics written to, ``topics_per_producer`` each, in the order
    they are first written to: a topic always goes through the same one, so its records keep
    their order. Produces, polls and flushes as one ``confluent_kafka.Producer`` does."""

    def __init__(self, config: dict[str, Any], *, topics_per_producer: int = TOPICS_PER_PRODUCER) -> None:
        self._config = config
        self._share = topics_per_producer
        self._producers: list[Producer] = []
        self._by_topic: dict[str, Producer] = {}

    def __len__(self) -> int:
        """How many producers (each a connection to the broker) it has opened."""
        return len(self._producers)

    def _for(self, topic: str) -> Producer:
        producer = self._by_topic.get(topic)
        if producer is None:
            if len(self._by_topic) >= len(self._producers) * self._share:
                from confluent_kafka import Producer

                self._producers.append(Producer(self._config))
            producer = self._by_topic[topic] = self._producers[-1]
        return producer

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **options: Any) -> None:
        """One record, as ``Producer.produce`` (``BufferError`` while its queue is full)."""
        self._for(topic).produce(topic, value, key, **options)

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports: each producer's waiting ones, and for ``timeout`` the first's."""
        served = sum(producer.poll(0) for producer in self._producers[1:])
        return served + (self._producers[0].poll(timeout) if self._producers else 0)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds in all for every record to be delivered; how many were not."""
        deadline = time.monotonic() + timeout
        return sum(producer.flush(max(0.0, deadline - time.monotonic())) for producer in self._producers)


def produce(
    bootstrap: str,
    records: Iterator[Record],
    *,
    rate: float | None = None,
    on_progress: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> ProduceSummary:
    """Send records, paced to ``rate`` per second every :data:`TICK_S` (None: as fast as the
    broker takes them), until they run out or ``stop`` is set."""
    # A paced stream is what receivers measure latency on, so it goes out as it is made; a
    # bulk load fills large compressed batches instead.
    tuned = {"linger.ms": 5} if rate else {"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4"}
    producer = Producers({
        "bootstrap.servers": bootstrap, "queue.buffering.max.messages": 500_000, **tuned,
        # librdkafka's own lines (`%6|…`) as log records, not on the terminal of a live view.
        "logger": logging.getLogger(__name__),
    })
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    started = time.monotonic()
    sent = 0
    for due in paced(rate, stop=stop) if rate else _chunks(stop):
        made = _send(producer, itertools.islice(records, due), delivered)
        sent += made
        producer.poll(0)
        if on_progress and made:
            on_progress(made)
        if made < due:  # the records ran out
            break
    unsent = producer.flush(60)
    if unsent:
        raise RetryLater(f"{unsent} records were still unsent after 60 s; is the broker at {bootstrap} up?")
    if failures:
        raise RetryLater(f"{len(failures)} of {sent} records were not delivered; first error: {failures[0]}")
    return ProduceSummary(sent=sent, seconds=time.monotonic() - started)


def _chunks(stop: threading.Event | None) -> Iterator[int]:
    """An unpaced stream's chunks: :data:`PROGRESS_EVERY` records at a time, until ``stop``."""
    while not (stop is not None and stop.is_set()):
        yield PROGRESS_EVERY


def _send(producer: Producers, records: Iterable[Record], delivered: Callable[[Any, Any], None]) -> int:
    """Produce ``records``; how many there were. While the producer's local queue is full,
    wait for the broker to catch up."""
    sent = 0
    for record in records:
        while True:
            try:
                producer.produce(record.topic, record.value, record.key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
    return sent


__all__ = [
    "PROGRESS_EVERY", "STAMP_EVERY_S", "TICK_S", "TOPICS_PER_PRODUCER", "EventFactory", "EventType", "ProduceSummary",
    "Producers", "Record", "catalog", "paced", "produce",
    "subtenants_of", "tenant_id", "topics",
]
