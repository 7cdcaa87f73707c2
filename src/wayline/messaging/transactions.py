"""Transactions over HTTP: begin, publish across topics, commit or abort; Kafka transactions underneath.

Each instance holds a bounded pool of transactional producers, slot `n` with the fixed
transactional id `wayline-messaging.<instance>.<n>`. A slot holds one open transaction at a
time, and one API key at most `per_key` of them, so no key can take the whole pool. Because
the id is fixed per slot, a restarted instance's `init_transactions` fences the producers of
its previous life and aborts whatever they left open. It does so for every slot as soon as
it starts (a thread; a begin waits for it): a transaction a crash left open holds back every
read_committed reader of its partitions, which must not last until that slot's next begin.
A broker-side `transaction.timeout.ms` a little above ours aborts them too if the instance
never comes back.

A transaction id is `<instance>~<slot>~<token>`: any instance can tell whose it is, and one
that is not the owner answers `Misdirected` (HTTP 421) naming the instance to send it to.
Only the API key that began a transaction may publish into, commit or abort it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer

from wayline.core.errors import Conflict, NotFound, RejectedInput, RetryLater, TooMany
from wayline.messaging.errors import Busy, Misdirected
from wayline.messaging.producer import producer_config, write
from wayline.messaging.records import Outgoing, Result, Written

SEPARATOR = "~"
# The broker aborts a transaction this long after ours would have, if this instance is gone by then.
BROKER_MARGIN_S = 30
# How long `init_transactions` may take: it finds the coordinator and fences the previous producer.
INIT_TIMEOUT_S = 30

log = logging.getLogger(__name__)


@dataclass
class _Open:
    id: str
    owner: str
    deadline: float
    written: int = 0
    topics: set[str] = field(default_factory=set)


@dataclass
class _Slot:
    index: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    producer: Producer | None = None
    open: _Open | None = None


@dataclass(frozen=True)
class Outcome:
    id: str
    state: str  # "open", "committed" or "aborted"
    written: int
    topics: list[str]


class TransactionPool:
    def __init__(
        self, bootstrap: str, instance: str, size: int, per_key: int, timeout_s: float, linger_ms: float,
        delivery_timeout_ms: int, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bootstrap = bootstrap
        self.instance = instance
        self._per_key = per_key
        self._timeout_s = timeout_s
        self._linger_ms = linger_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._clock = clock
        self._slots = [_Slot(n) for n in range(size)]
        self._pick = threading.Lock()
        self._stop = threading.Event()
        self._fenced = threading.Event()
        threading.Thread(target=self._fence, name="messaging-txn-fence", daemon=True).start()
        self._reaper = threading.Thread(target=self._reap_forever, name="messaging-txn-reaper", daemon=True)
        self._reaper.start()

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    def begin(self, owner: str) -> Outcome:
        self._fenced.wait(INIT_TIMEOUT_S)
        with self._pick:
            held = sum(s.open is not None and s.open.owner == owner for s in self._slots)
            if held >= self._per_key:
                raise TooMany(f"this API key holds {held} open transactions on instance {self.instance}, the most one "
                              "key may: commit or abort one first")
            slot = next((s for s in self._slots if s.open is None and not s.lock.locked()), None)
            if slot is None:
                raise Busy(f"all {len(self._slots)} transactional producers of instance {self.instance} hold open "
                           "transactions: commit or abort one, or retry shortly")
            slot.lock.acquire()
            # Taken while the pick lock is held, so that concurrent begins of one key all count it.
            slot.open = txn = _Open(
                id=SEPARATOR.join((self.instance, str(slot.index), secrets.token_urlsafe(12))),
                owner=owner, deadline=self._clock() + self._timeout_s,
            )
        try:
            self._producer(slot).begin_transaction()
        except KafkaException as exc:
            self._drop(slot)
            raise RetryLater(f"could not begin a transaction: {exc.args[0].str()}") from exc
        except RetryLater:
            slot.open = None
            raise
        finally:
            slot.lock.release()
        return _outcome(txn, "open")

    def publish(self, transaction_id: str, owner: str, topic: str, records: Sequence[Outgoing]) -> list[Result]:
        with self._held(transaction_id, owner) as (slot, txn):
            assert slot.producer is not None
            results = write(slot.producer, topic, records, self._delivery_timeout_ms / 1000 + 5, flush=True)
            txn.written += sum(isinstance(r, Written) for r in results)
            txn.topics.add(topic)
            return results

    def commit(self, transaction_id: str, owner: str) -> Outcome:
        with self._held(transaction_id, owner) as (slot, txn):
            assert slot.producer is not None
            try:
                slot.producer.commit_transaction(self._timeout_s)
            except KafkaException as exc:
                aborted = self._abort(slot)
                what = "aborted" if aborted else "left to the broker to abort"
                raise Conflict(f"transaction {txn.id} could not commit and was {what}: {exc.args[0].str()}") from exc
            slot.open = None
            return _outcome(txn, "committed")

    def abort(self, transaction_id: str, owner: str) -> Outcome:
        with self._held(transaction_id, owner) as (slot, txn):
            self._abort(slot)
            return _outcome(txn, "aborted")

    def describe(self, transaction_id: str, owner: str) -> Outcome:
        with self._held(transaction_id, owner) as (_slot, txn):
            return _outcome(txn, "open")

    def reap(self) -> int:
        """Abort the transactions past their timeout; returns how many."""
        reaped = 0
        for slot in self._slots:
            if slot.open is None or slot.open.deadline > self._clock():
                continue
            with slot.lock:
                if slot.open is not None and slot.open.deadline <= self._clock():
                    self._abort(slot)
                    reaped += 1
        return reaped

    def close(self) -> None:
        self._stop.set()
        self._reaper.join(timeout=5)
        for slot in self._slots:
            with slot.lock:
                if slot.open is not None:
                    self._abort(slot)
                # librdkafka's client lives until its last reference goes: a closed pool
                # keeps no producer reconnecting to the broker.
                slot.producer = None

    def _fence(self) -> None:
        """Start every slot's producer, fencing its previous life's (see the module docstring)."""
        try:
            for slot in self._slots:
                with slot.lock:
                    # Checked under the slot's lock: a pool closed meanwhile must not get a producer back.
                    if self._stop.is_set():
                        return
                    if slot.producer is None:
                        self._producer(slot)
        except RetryLater as exc:
            # The broker is unreachable: the slots left are fenced when they begin their first transaction.
            log.warning("transactional producers of instance %s not fenced at start: %s", self.instance, exc)
        finally:
            self._fenced.set()

    def _reap_forever(self) -> None:
        while not self._stop.wait(min(1.0, self._timeout_s / 4)):
            self.reap()

    @contextmanager
    def _held(self, transaction_id: str, owner: str) -> Iterator[tuple[_Slot, _Open]]:
        slot = self._slot_of(transaction_id)
        with slot.lock:
            txn = slot.open
            if txn is None or txn.id != transaction_id or txn.owner != owner:
                raise NotFound(f"transaction {transaction_id} not found: it was committed, aborted, timed out, "
                               "or was begun with another API key")
            if txn.deadline <= self._clock():
                self._abort(slot)
                raise NotFound(f"transaction {transaction_id} timed out after {self._timeout_s:g} s and was aborted")
            yield slot, txn

    def _slot_of(self, transaction_id: str) -> _Slot:
        parts = transaction_id.split(SEPARATOR)
        # isdigit alone takes digits of other scripts ("²", "٣"), which int() then refuses.
        if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()):
            raise RejectedInput(f"transaction id {transaction_id!r} is not one this API returned")
        instance, index = parts[0], int(parts[1])
        if instance != self.instance:
            raise Misdirected(
                f"transaction {transaction_id} lives on instance {instance}, not on this one ({self.instance}): "
                f"send it to {instance}", instance,
            )
        if index >= len(self._slots):
            raise NotFound(f"transaction {transaction_id} not found")
        return self._slots[index]

    def _producer(self, slot: _Slot) -> Producer:
        if slot.producer is None:
            producer = Producer(producer_config(
                self._bootstrap, self._linger_ms, self._delivery_timeout_ms,
                **{"transactional.id": f"wayline-messaging.{self.instance}.{slot.index}",
                   "transaction.timeout.ms": int((self._timeout_s + BROKER_MARGIN_S) * 1000)},
            ))
            try:
                producer.init_transactions(INIT_TIMEOUT_S)
            except KafkaException as exc:
                raise RetryLater(f"could not start a transactional producer: {exc.args[0].str()}") from exc
            slot.producer = producer
        return slot.producer

    def _abort(self, slot: _Slot) -> bool:
        """Abort the slot's transaction; a producer that cannot is dropped (the broker's timeout aborts it)."""
        slot.open = None
        if slot.producer is None:
            return False
        try:
            slot.producer.abort_transaction(self._timeout_s)
            return True
        except KafkaException:
            self._drop(slot)
            return False

    @staticmethod
    def _drop(slot: _Slot) -> None:
        # A fresh producer with the same transactional id fences this one and aborts what it left open.
        slot.producer = None
        slot.open = None


def _outcome(txn: _Open, state: str) -> Outcome:
    return Outcome(txn.id, state, txn.written, sorted(txn.topics))


__all__ = ["INIT_TIMEOUT_S", "Outcome", "SEPARATOR", "TransactionPool"]
