"""Groups of sends under a deadline, against real HTTP servers on 127.0.0.1."""

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from tests.delivery.servers import Recorder, loopback_transport, serve
from wayline.core.errors import RetryLater
from wayline.core.secret import Secret
from wayline.delivery.attempt import Pending, WillRetry, settle
from wayline.delivery.auth import BasicAuth
from wayline.delivery.batch import Batcher, BatchItem, BatchKey, BatchLimits
from wayline.delivery.circuit import CircuitBreakers, CircuitSettings, CircuitState
from wayline.delivery.dispatch import Dispatcher, TokenBucket
from wayline.delivery.transports.base import Endpoint, EndpointLimits, Failure, FailureKind, Request, Response
from wayline.delivery.transports.memory import MemoryTransport


def request(endpoint: Endpoint, n: int = 0) -> Request:
    return Request(endpoint, orjson.dumps({"n": n}), {"content-type": "application/json"})


async def ok(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def hangs(request: web.Request) -> web.Response:
    await asyncio.sleep(60)
    return web.Response(status=200)


def test_the_token_bucket_spaces_requests_after_its_burst() -> None:
    bucket = TokenBucket(rate_per_s=10, burst=3)
    waits = [bucket.reserve(100.0) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])
    # After a quiet second the burst is back.
    assert [bucket.reserve(101.5) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_a_hanging_endpoint_is_cut_at_the_deadline_while_the_fast_one_is_served() -> None:
    recorder = Recorder()

    async def fast(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/fast": fast, "/slow": hangs}) as base, loopback_transport() as http:
            quick = Endpoint("ep_fast", f"{base}/fast")
            stuck = Endpoint("ep_slow", f"{base}/slow", timeout_s=30)
            # The hanging endpoint's requests come first and outnumber its in-flight slots.
            requests = [request(stuck, n) for n in range(40)] + [request(quick, n) for n in range(20)]
            loop = asyncio.get_running_loop()
            started = loop.time()
            results = await Dispatcher(http).deliver_all(requests, deadline_s=1.0)
            took = loop.time() - started

        slow_results, fast_results = results[:40], results[40:]
        assert all(isinstance(r, Response) and r.status == 200 for r in fast_results)
        assert max(r.elapsed_s for r in fast_results) < 0.5
        assert len(recorder.requests) == 20
        assert max(r.at for r in recorder.requests) - started < 0.5, "the fast endpoint waited on the slow one"
        assert all(isinstance(r, Failure) and r.kind is FailureKind.DEADLINE for r in slow_results)
        details = {r.detail.split(" within")[0] for r in slow_results if isinstance(r, Failure)}
        assert details == {"no response", "not sent"}
        assert 1.0 <= took < 1.5

    asyncio.run(scenario())


def test_once_only_a_slow_endpoint_is_left_it_is_cut_as_a_straggler_long_before_the_deadline() -> None:
    cut: list[str] = []

    async def scenario() -> tuple[list, float]:
        async with serve({"/fast": ok, "/slow": hangs}) as base, loopback_transport() as http:
            quick = Endpoint("ep_fast", f"{base}/fast")
            stuck = Endpoint("ep_slow", f"{base}/slow", timeout_s=30)
            requests = [request(stuck, n) for n in range(5)] + [request(quick, n) for n in range(20)]
            started = time.monotonic()
            results = await Dispatcher(http).deliver_all(requests, deadline_s=20, straggler_cut_s=0.3,
                                                         on_straggler=cut.append)
            return results, time.monotonic() - started

    results, took = asyncio.run(scenario())
    assert took < 3, "cut 0.3 s after only the slow endpoint was left, not at the 20 s deadline"
    assert cut == ["ep_slow"]
    assert all(isinstance(r, Response) and r.status == 200 for r in results[5:])
    assert all(isinstance(r, Failure) and r.kind is FailureKind.DEADLINE and "straggler" in r.detail
               for r in results[:5])


def test_a_busy_endpoint_is_no_straggler_while_it_answers() -> None:
    cut: list[str] = []

    async def scenario() -> list:
        async with serve({"/hook": ok}) as base, loopback_transport() as http:
            # Its rate limit keeps it busy for about a second, far longer than the cut: but
            # each request is answered at once, so none is ever out for 0.2 s.
            endpoint = Endpoint("ep_busy", f"{base}/hook", limits=EndpointLimits(max_in_flight=2, rate_per_s=20))
            return await Dispatcher(http).deliver_all([request(endpoint, n) for n in range(20)], deadline_s=20,
                                                      straggler_cut_s=0.2, on_straggler=cut.append)

    results = asyncio.run(scenario())
    assert cut == [] and [r.status for r in results if isinstance(r, Response)] == [200] * 20


def test_when_every_endpoint_answers_slowly_none_is_a_straggler() -> None:
    cut: list[str] = []

    async def slow(request: web.Request) -> web.Response:
        # Out longer than the cut, but like every other request of the group: a loaded
        # sender or a shared upstream, not one endpoint holding the others up.
        await asyncio.sleep(0.4 + random.random() * 0.4)
        return web.Response(status=200)

    async def scenario() -> list:
        async with serve({"/a": slow, "/b": slow, "/c": slow}) as base, loopback_transport() as http:
            endpoints = [Endpoint(f"ep_{name}", f"{base}/{name}", limits=EndpointLimits(max_in_flight=4))
                         for name in "abc"]
            requests = [request(endpoints[n % 3], n) for n in range(36)]
            return await Dispatcher(http).deliver_all(requests, deadline_s=20, straggler_cut_s=0.2,
                                                      on_straggler=cut.append)

    results = asyncio.run(scenario())
    assert cut == [] and [r.status for r in results if isinstance(r, Response)] == [200] * 36


def test_an_endpoint_answering_at_the_groups_pace_is_no_straggler_for_one_slow_answer() -> None:
    cut: list[str] = []
    answered = 0

    async def mostly_quick(request: web.Request) -> web.Response:
        nonlocal answered
        answered += 1
        # Its queue outlasts the other endpoints', and one answer in six is slow: a loaded
        # receiver's tail, not an endpoint holding the stage up.
        await asyncio.sleep(0.8 if answered % 6 == 0 else 0.02)
        return web.Response(status=200)

    async def scenario() -> list:
        async with serve({"/busy": mostly_quick, "/a": ok, "/b": ok}) as base, loopback_transport() as http:
            busy = Endpoint("ep_busy", f"{base}/busy", limits=EndpointLimits(max_in_flight=2))
            others = [Endpoint(f"ep_{name}", f"{base}/{name}") for name in "ab"]
            requests = [request(busy, n) for n in range(24)] + [request(e, n) for e in others for n in range(4)]
            return await Dispatcher(http).deliver_all(requests, deadline_s=20, straggler_cut_s=0.2,
                                                      on_straggler=cut.append)

    results = asyncio.run(scenario())
    assert cut == [] and [r.status for r in results if isinstance(r, Response)] == [200] * 32


def test_when_most_endpoints_stall_none_is_a_straggler_though_one_is_done() -> None:
    cut: list[str] = []

    async def scenario() -> list:
        # One endpoint answers; the five others stall behind a shared upstream (a stage
        # that catches up a backlog on a loaded machine): the slowness is not theirs.
        routes = {"/a": ok, **{f"/{name}": hangs for name in "bcdef"}}
        async with serve(routes) as base, loopback_transport() as http:
            endpoints = [Endpoint(f"ep_{name}", f"{base}/{name}", timeout_s=30) for name in "abcdef"]
            requests = [request(endpoints[n % 6], n) for n in range(18)]
            return await Dispatcher(http).deliver_all(requests, deadline_s=1.5, straggler_cut_s=0.2,
                                                      on_straggler=cut.append)

    results = asyncio.run(scenario())
    assert cut == []
    assert [r.status for r in results[::6] if isinstance(r, Response)] == [200] * 3
    stalled = [r for n, r in enumerate(results) if n % 6]
    assert all(isinstance(r, Failure) and "delivery deadline" in r.detail for r in stalled)


def test_cancelling_the_caller_leaves_no_send_behind() -> None:
    async def scenario() -> None:
        async with serve({"/slow": hangs}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_slow", f"{base}/slow")
            group = Dispatcher(http).deliver_all([request(endpoint, n) for n in range(5)], deadline_s=30)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(group, timeout=0.2)
            assert [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Dispatcher._deliver"] == []

    asyncio.run(scenario())


def test_a_group_that_finishes_early_does_not_wait_for_the_deadline() -> None:
    async def scenario() -> None:
        async with serve({"/hook": ok}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_1", f"{base}/hook")
            started = time.monotonic()
            results = await Dispatcher(http).deliver_all([request(endpoint, n) for n in range(50)], deadline_s=30)
            assert time.monotonic() - started < 5
            assert [r.status for r in results if isinstance(r, Response)] == [200] * 50

    asyncio.run(scenario())


def test_an_endpoint_never_has_more_than_its_in_flight_limit_and_a_new_limit_applies() -> None:
    active = 0
    peaks: list[int] = []

    async def counts(request: web.Request) -> web.Response:
        nonlocal active
        active += 1
        peaks[-1] = max(peaks[-1], active)
        await asyncio.sleep(0.02)
        active -= 1
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": counts}) as base, loopback_transport() as http:
            dispatcher = Dispatcher(http)
            for limit in (3, 6):
                peaks.append(0)
                endpoint = Endpoint("ep_1", f"{base}/hook", limits=EndpointLimits(max_in_flight=limit))
                results = await dispatcher.deliver_all([request(endpoint, n) for n in range(15)], deadline_s=10)
                assert all(isinstance(r, Response) for r in results)

    asyncio.run(scenario())
    assert peaks == [3, 6]


def test_an_endpoint_rate_limit_spaces_its_requests() -> None:
    recorder = Recorder()

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    started: list[float] = []

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, loopback_transport() as http:
            limits = EndpointLimits(max_in_flight=10, rate_per_s=20, burst=2)
            endpoint = Endpoint("ep_1", f"{base}/hook", limits=limits)
            started.append(asyncio.get_running_loop().time())
            await Dispatcher(http).deliver_all([request(endpoint, n) for n in range(8)], deadline_s=10)

    asyncio.run(scenario())
    arrivals = sorted(r.at for r in recorder.requests)
    # Two at once, then one per 50 ms: the last may not go before 300 ms from the start (the
    # first may arrive late, behind its connection's setup, so the start is the clock's).
    assert arrivals[-1] - started[0] >= 0.3 - 0.01
    assert arrivals[1] - arrivals[0] < 0.04


def test_the_circuit_opens_on_a_failing_endpoint_and_a_probe_closes_it() -> None:
    hits = 0
    healthy = False

    async def flaky(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        return web.Response(status=200 if healthy else 503)

    now = [0.0]
    breakers = CircuitBreakers(CircuitSettings(consecutive_failures=3, cool_down_s=60), clock=lambda: now[0])

    async def scenario() -> None:
        nonlocal healthy
        async with serve({"/hook": flaky}) as base, loopback_transport() as http:
            dispatcher = Dispatcher(http, breakers)
            endpoint = Endpoint("ep_1", f"{base}/hook")
            for n in range(3):
                [result] = await dispatcher.deliver_all([request(endpoint, n)], deadline_s=5)
                assert isinstance(result, Response) and result.status == 503
            assert breakers["ep_1"].state is CircuitState.OPEN

            results = await dispatcher.deliver_all([request(endpoint, n) for n in range(5)], deadline_s=5)
            assert {r.kind for r in results if isinstance(r, Failure)} == {FailureKind.CIRCUIT_OPEN}
            assert hits == 3, "an open circuit sends nothing"

            healthy = True
            now[0] += 60
            results = await dispatcher.deliver_all([request(endpoint, n) for n in range(3)], deadline_s=5)
            # One probe goes through; the others still wait for it to report.
            assert [type(r).__name__ for r in results].count("Response") == 1
            assert breakers["ep_1"].state is CircuitState.CLOSED
            results = await dispatcher.deliver_all([request(endpoint, n) for n in range(3)], deadline_s=5)
            assert all(isinstance(r, Response) and r.status == 200 for r in results)

    asyncio.run(scenario())


def test_a_cut_is_one_failure_of_its_endpoint_for_the_circuit_however_many_requests_were_out() -> None:
    breakers = CircuitBreakers(CircuitSettings(consecutive_failures=2))
    states = []

    async def scenario() -> None:
        async with serve({"/slow": hangs}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_slow", f"{base}/slow", limits=EndpointLimits(max_in_flight=16))
            dispatcher = Dispatcher(http, breakers)
            for _ in range(2):
                results = await dispatcher.deliver_all([request(endpoint, n) for n in range(16)], deadline_s=0.3)
                assert all(isinstance(r, Failure) and r.kind is FailureKind.DEADLINE for r in results)
                states.append(breakers["ep_slow"].state)

    asyncio.run(scenario())
    # Sixteen requests out when the deadline came are one failure, not sixteen in a row;
    # the second group cut is the second failure in a row.
    assert states == [CircuitState.CLOSED, CircuitState.OPEN]


def test_credentials_that_cannot_be_had_fail_the_request_unsent() -> None:
    recorder = Recorder()

    class Unavailable:
        async def headers(self) -> dict[str, str]:
            raise RetryLater("token server down")

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_1", f"{base}/hook", auth=Unavailable())
            [result] = await Dispatcher(http).deliver_all([request(endpoint)], deadline_s=5)
        assert isinstance(result, Failure) and result.kind is FailureKind.AUTH
        assert result.detail == "token server down"

    asyncio.run(scenario())
    assert recorder.requests == []


def test_a_429_with_retry_after_schedules_the_retry_when_asked() -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "120"})

    async def scenario() -> None:
        now = datetime.now(UTC)
        pending = Pending.single("e1", b'{"id":"e1"}', subscription_id="sub_1", endpoint_id="ep_1", now=now)
        async with serve({"/hook": busy}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_1", f"{base}/hook")
            [result] = await Dispatcher(http).deliver_all([pending.request(endpoint, [Secret.generate()], now)], 5)
        state = settle(pending, result, now, random.Random(1))
        assert isinstance(state, WillRetry)
        assert state.next.due_at == now + timedelta(seconds=120)
        assert state.next.attempts == 1

    asyncio.run(scenario())


def test_single_and_batch_deliveries_arrive_signed_and_authenticated() -> None:
    recorder = Recorder()
    secret = Secret.generate()

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    events = [
        orjson.dumps({"specversion": "1.0", "id": f"e{n}", "source": "/s", "type": "t", "tenantid": "7"})
        for n in range(5)
    ]

    async def scenario() -> None:
        now = datetime.now(UTC)
        batcher = Batcher(lambda _: BatchLimits(max_count=3))
        [batch] = batcher.add(BatchKey("sub_b"), [BatchItem(f"e{n}", body) for n, body in enumerate(events[:3])], now)
        deliveries = [
            Pending.single("e4", events[4], subscription_id="sub_s", endpoint_id="ep_1", now=now),
            Pending.batch(batch, endpoint_id="ep_1", now=now),
        ]
        async with serve({"/hook": hook}) as base, loopback_transport() as http:
            endpoint = Endpoint("ep_1", f"{base}/hook", auth=BasicAuth("wayline", "s3cret"))
            requests = [d.request(endpoint, [secret], now) for d in deliveries]
            results = await Dispatcher(http).deliver_all(requests, deadline_s=5)
        assert [r.status for r in results if isinstance(r, Response)] == [204, 204]

    asyncio.run(scenario())
    # By content: the two are sent concurrently, so the order they arrive in is not the test's.
    assert len(recorder.requests) == 2
    (single,) = [r for r in recorder.requests if isinstance(orjson.loads(r.body), dict)]
    (batched,) = [r for r in recorder.requests if r is not single]
    verify = Webhook(secret.text).verify
    assert verify(single.body, single.headers)["id"] == "e4"
    assert [e["id"] for e in verify(batched.body, batched.headers)] == ["e0", "e1", "e2"]
    assert single.headers["content-type"] == "application/cloudevents+json"
    assert batched.headers["content-type"] == "application/cloudevents-batch+json"
    assert single.headers["authorization"] == batched.headers["authorization"] == "Basic d2F5bGluZTpzM2NyZXQ="


def test_the_in_flight_limit_and_the_deadline_hold_on_the_in_memory_transport_too() -> None:
    active, peak = 0, 0

    async def answer(sent: Request) -> Response:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(60 if sent.endpoint.id == "ep_hang" else 0.01)
        active -= 1
        return Response(200, {}, b"", 0.01)

    limited = Endpoint("ep_1", "http://127.0.0.1:9/", limits=EndpointLimits(max_in_flight=2))
    hanging = Endpoint("ep_hang", "http://127.0.0.1:9/")

    async def scenario() -> list[object]:
        async with MemoryTransport(answer) as transport:
            return await Dispatcher(transport).deliver_all(
                [request(limited, n) for n in range(8)] + [request(hanging)], deadline_s=0.5)

    started = time.monotonic()
    results = asyncio.run(scenario())
    assert time.monotonic() - started < 5
    assert all(isinstance(r, Response) for r in results[:8])
    assert isinstance(results[8], Failure) and results[8].kind == FailureKind.DEADLINE
    assert peak <= 3, "two for the limited endpoint, one for the hanging one"
