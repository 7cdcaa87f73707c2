"""The snapshot holder: polls the version at most every poll_s, reloads only on a change,
and keeps delivering with what it has while the registry cannot be read."""

from dataclasses import dataclass

import pytest

from wayline.core.errors import ConfigError, RetryLater
from wayline.delivery.holder import Polled, SnapshotHolder


@dataclass(frozen=True)
class Loaded:
    version: int


class Registry:
    def __init__(self) -> None:
        self.version = 1
        self.polls = 0
        self.loads = 0
        self.down = False

    def read_version(self) -> int:
        self.polls += 1
        if self.down:
            raise RetryLater("registry unreachable")
        return self.version

    def load(self) -> Loaded:
        self.loads += 1
        if self.down:
            raise RetryLater("registry unreachable")
        return Loaded(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def holder(registry: Registry, clock: Clock, retired: list[Loaded]) -> SnapshotHolder[Loaded]:
    return SnapshotHolder(registry.load, registry.read_version, poll_s=2.0, retire=retired.append, clock=clock)


def test_the_version_is_polled_at_most_every_poll_s_and_a_change_swaps_the_snapshot() -> None:
    registry, clock, retired = Registry(), Clock(), list[Loaded]()
    held = holder(registry, clock, retired)
    assert held.current() == Loaded(1) and (registry.loads, registry.polls) == (1, 0)

    registry.version = 2
    clock.now += 1.9
    assert held.current() == Loaded(1), "too soon to poll"
    assert registry.polls == 0

    clock.now += 0.1
    assert held.current() == Loaded(2)
    assert (registry.loads, registry.polls, retired) == (2, 1, [Loaded(1)])

    clock.now += 5
    assert held.current() == Loaded(2), "an unchanged version loads nothing"
    assert (registry.loads, registry.polls) == (2, 2)


def test_a_registry_outage_keeps_the_current_snapshot_until_it_is_back() -> None:
    registry, clock, retired = Registry(), Clock(), list[Loaded]()
    held = holder(registry, clock, retired)
    held.current()
    registry.version, registry.down = 3, True
    clock.now += 2
    assert held.current() == Loaded(1)
    registry.down = False
    clock.now += 1
    assert held.current() == Loaded(1), "the next poll waits its turn"
    clock.now += 1
    assert held.current() == Loaded(3)
    assert retired == [Loaded(1)]


def test_the_first_load_must_succeed() -> None:
    def broken() -> Loaded:
        raise ConfigError("a stored secret does not decrypt")

    with pytest.raises(ConfigError):
        SnapshotHolder(broken, lambda: 1, poll_s=1).current()


def test_a_polled_value_is_read_at_most_every_poll_and_kept_while_reads_fail() -> None:
    clock = Clock()
    reads: list[frozenset[str]] = [frozenset({"ep_1"}), frozenset({"ep_2"})]
    failing = {"now": False}

    def read() -> frozenset[str]:
        if failing["now"]:
            raise RetryLater("database unreachable")
        return reads.pop(0)

    polled = Polled(read, frozenset(), poll_s=2.0, clock=lambda: clock.now)
    assert polled.current() == {"ep_1"}, "the first call reads"
    clock.now += 1.9
    assert polled.current() == {"ep_1"} and len(reads) == 1, "no read within the poll interval"
    failing["now"] = True
    clock.now += 0.2
    assert polled.current() == {"ep_1"}, "a failed read keeps the last value"
    failing["now"] = False
    clock.now += 2.0
    assert polled.current() == {"ep_2"}


def test_a_refresh_makes_the_next_call_read_the_version_however_recent_the_last_poll() -> None:
    """The job disabled a subscription (410 Gone) just after another query's poll: its
    next micro-batch must not send with the old snapshot for up to poll_s."""
    registry, clock, retired = Registry(), Clock(), list[Loaded]()
    held = holder(registry, clock, retired)
    held.current()
    clock.now += 2.0
    assert held.current() == Loaded(1) and registry.polls == 1, "the batching query's tick polls"
    registry.version = 2
    clock.now += 0.5
    assert held.current() == Loaded(1), "within poll_s of that poll"
    held.refresh()
    assert held.current() == Loaded(2) and registry.polls == 2
    clock.now += 0.5
    assert held.current() == Loaded(2) and registry.polls == 2, "then polled at most every poll_s again"
