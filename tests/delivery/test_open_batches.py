from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from wayline.delivery.batch import BatchItem, BatchLimits
from wayline.delivery.open_batches import HeldPair, OpenBatches

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORK = "wayline.delivery.work"


def _pair(offset: int, subscription: str = "sub-a", partition: int = 0, endpoint: str = "ep-a") -> HeldPair:
    return HeldPair((WORK, partition), offset, subscription, endpoint, BatchItem(f"e{offset}", b'{"id":"e%d"}' % offset))


def _limits(count: int = 3, wait_ms: int = 1000):
    return lambda _subscription: BatchLimits(count, timedelta(milliseconds=wait_ms))


def test_a_full_batch_goes_at_once_and_unpins_its_offsets() -> None:
    batches = OpenBatches(_limits(count=3))
    assert batches.add([_pair(10), _pair(11)], T0) == []
    assert batches.commit_position((WORK, 0), 12) == 10  # the open batch holds 10 and 11
    ready = batches.add([_pair(12), _pair(13)], T0)
    assert [r.batch.event_ids for r in ready] == [("e10", "e11", "e12")]
    assert ready[0].endpoint_id == "ep-a"
    assert ready[0].batch.body == b'[{"id":"e10"},{"id":"e11"},{"id":"e12"}]'
    assert batches.commit_position((WORK, 0), 14) == 13  # 13 is still open
    assert batches.pairs == 1


def test_a_batch_waits_max_wait_from_its_first_pair_and_then_is_due() -> None:
    batches = OpenBatches(_limits(count=100, wait_ms=1000))
    batches.add([_pair(1)], T0)
    batches.add([_pair(2)], T0 + timedelta(milliseconds=600))
    assert batches.next_deadline() == T0 + timedelta(seconds=1)
    assert batches.due(T0 + timedelta(milliseconds=999)) == []
    ready = batches.due(T0 + timedelta(seconds=1))
    assert [r.batch.event_ids for r in ready] == [("e1", "e2")]
    assert batches.next_deadline() is None
    assert batches.commit_position((WORK, 0), 3) == 3


def test_pins_are_per_partition_and_subscriptions_batch_apart() -> None:
    batches = OpenBatches(_limits(count=2))
    ready = batches.add([_pair(5, "sub-a", 0), _pair(7, "sub-b", 1, "ep-b"), _pair(6, "sub-a", 0)], T0)
    assert [(r.batch.key.subscription_id, r.batch.event_ids) for r in ready] == [("sub-a", ("e5", "e6"))]
    assert batches.commit_position((WORK, 0), 7) == 7
    assert batches.commit_position((WORK, 1), 8) == 7


def test_dropping_a_partition_forgets_its_open_batches_so_they_are_read_again() -> None:
    batches = OpenBatches(_limits(count=10))
    batches.add([_pair(3, "sub-a", 0), _pair(4, "sub-b", 1, "ep-b")], T0)
    assert batches.drop({(WORK, 0)}) == 1
    assert batches.commit_position((WORK, 0), 4) == 4
    assert batches.commit_position((WORK, 1), 5) == 4
    # The dropped batch's timer fires on nothing; the other's still sends.
    assert [r.batch.event_ids for r in batches.due(T0 + timedelta(seconds=2))] == [("e4",)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.integers(0, 1500)), max_size=60),
       st.integers(1, 5))
def test_every_pair_is_sent_once_and_the_commit_never_passes_an_unsent_pair(
        arrivals: list[tuple[str, int]], count: int) -> None:
    batches = OpenBatches(_limits(count=count, wait_ms=500))
    sent: list[str] = []
    now = T0
    for offset, (subscription, gap_ms) in enumerate(arrivals):
        now += timedelta(milliseconds=gap_ms)
        ready = batches.due(now) + batches.add([_pair(offset, subscription)], now)
        sent += [event for r in ready for event in r.batch.event_ids]
        position = batches.commit_position((WORK, 0), offset + 1)
        unsent = {f"e{o}" for o in range(offset + 1)} - set(sent)
        # Everything before the commit position was sent; the first unsent pair is pinned.
        assert all(f"e{o}" in sent for o in range(position))
        assert position == min([int(e[1:]) for e in unsent], default=offset + 1)
    sent += [event for r in batches.due(now + timedelta(seconds=1)) for event in r.batch.event_ids]
    assert sorted(sent, key=lambda e: int(e[1:])) == [f"e{o}" for o in range(len(arrivals))]
