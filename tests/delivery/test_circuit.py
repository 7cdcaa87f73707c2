import pytest

from wayline.core.errors import RejectedInput
from wayline.delivery.circuit import CircuitBreaker, CircuitBreakers, CircuitSettings, CircuitState, Throttles

SETTINGS = CircuitSettings(consecutive_failures=3, failure_rate=0.5, window=10, min_calls=6, cool_down_s=30)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def breaker(clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(SETTINGS, clock)


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert breaker.allow()
        breaker.record_failure()


def test_opens_after_consecutive_failures(breaker: CircuitBreaker) -> None:
    fail(breaker, 2)
    assert breaker.state is CircuitState.CLOSED
    fail(breaker, 1)
    assert breaker.state is CircuitState.OPEN
    assert not breaker.allow()


def test_a_success_resets_the_consecutive_count(breaker: CircuitBreaker) -> None:
    fail(breaker, 2)
    breaker.record_success()
    fail(breaker, 2)
    assert breaker.state is CircuitState.CLOSED


def test_opens_on_the_failure_rate_once_enough_calls_are_in(breaker: CircuitBreaker) -> None:
    # Alternating failures never make 3 in a row, but half of the window failed.
    for _ in range(2):
        breaker.record_failure()
        breaker.record_success()
    breaker.record_failure()
    assert breaker.state is CircuitState.CLOSED  # 5 calls: below min_calls
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN  # 4 of 7 failed


def test_old_outcomes_leave_the_window(breaker: CircuitBreaker) -> None:
    for _ in range(2):
        breaker.record_failure()
        breaker.record_success()
    for _ in range(10):
        breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state is CircuitState.CLOSED  # 2 of the last 10


def test_one_probe_after_the_cool_down_closes_on_success(breaker: CircuitBreaker, clock: Clock) -> None:
    fail(breaker, 3)
    clock.now += 29.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow()
    assert breaker.state is CircuitState.HALF_OPEN
    assert not breaker.allow()  # only one probe at a time
    breaker.record_success()
    assert breaker.state is CircuitState.CLOSED
    assert breaker.allow()


def test_a_failed_probe_opens_for_another_cool_down(breaker: CircuitBreaker, clock: Clock) -> None:
    fail(breaker, 3)
    clock.now += 30
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN
    clock.now += 29
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()


def test_a_lost_probe_is_replaced_after_a_cool_down(breaker: CircuitBreaker, clock: Clock) -> None:
    fail(breaker, 3)
    clock.now += 30
    assert breaker.allow()
    clock.now += 30  # the probe's caller never reported back
    assert breaker.allow()


def test_late_outcomes_do_not_move_an_open_circuit(breaker: CircuitBreaker, clock: Clock) -> None:
    fail(breaker, 3)
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN
    clock.now += 30
    assert breaker.allow()


def test_each_endpoint_has_its_own_breaker(clock: Clock) -> None:
    breakers = CircuitBreakers(SETTINGS, clock)
    fail(breakers["ep_bad"], 3)
    assert breakers["ep_bad"].state is CircuitState.OPEN
    assert breakers["ep_good"].allow()


@pytest.mark.parametrize(
    "kwargs",
    [{"consecutive_failures": 0}, {"failure_rate": 0}, {"min_calls": 200}, {"cool_down_s": 0}],
)
def test_bad_settings_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(RejectedInput):
        CircuitSettings(**kwargs)  # type: ignore[arg-type]


def test_an_open_breaker_says_when_it_lets_a_request_through(breaker: CircuitBreaker, clock: Clock) -> None:
    assert breaker.retry_in() == 0.0
    fail(breaker, SETTINGS.consecutive_failures)
    clock.now += 10
    assert breaker.retry_in() == pytest.approx(SETTINGS.cool_down_s - 10)
    clock.now += SETTINGS.cool_down_s
    assert breaker.allow() and breaker.state is CircuitState.HALF_OPEN
    assert breaker.retry_in() == pytest.approx(SETTINGS.cool_down_s), "the probe is out: wait for its outcome"


def test_a_pause_holds_until_it_ends_and_a_longer_one_extends_it(clock: Clock) -> None:
    throttles = Throttles(clock)
    assert throttles.remaining("ep_1") == 0.0
    throttles.pause("ep_1", 20)
    throttles.pause("ep_1", 5)
    clock.now += 4
    assert throttles.remaining("ep_1") == pytest.approx(16), "a shorter pause does not cut a longer one"
    assert throttles.remaining("ep_2") == 0.0
    clock.now += 16
    assert throttles.remaining("ep_1") == 0.0
